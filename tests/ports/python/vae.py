#!/usr/bin/env python3
"""Fashion-MNIST VAE (as pytorch/examples' vae): a 16-dimensional latent, BCE + KL; Adam.

The PyTorch original of the `vae` port pair (tests/ports/README.md). `--loader-generator
global` leaves out the DataLoader's own generator, so that its base seed is drawn from the
global generator (a planted difference: the reparameterisation's noise then differs).

    PYTHONPATH=build/python /usr/bin/python3 tests/ports/python/vae.py --data ROOT \\
        --save-state init.safetensors --dump py_dump
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

import precprobe


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 200)
        self.fc_mu = nn.Linear(200, 16)
        self.fc_logvar = nn.Linear(200, 16)
        self.fc2 = nn.Linear(16, 200)
        self.fc3 = nn.Linear(200, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc_mu(h1), self.fc_logvar(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc2(z))
        return torch.sigmoid(self.fc3(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    """Reconstruction + KL divergence, summed over the batch."""
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2): appendix B of Kingma and Welling (2014)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def main():
    parser = argparse.ArgumentParser(description="Fashion-MNIST VAE (port pair: vae)")
    parser.add_argument("--data", default="data", help="torchvision root (ROOT/FashionMNIST/raw)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dump", help="record with precprobe into this directory")
    parser.add_argument("--config", help="msprobe config.json for the debugger")
    parser.add_argument("--save-state", help="write the initial weights here")
    parser.add_argument("--load-state", help="start from these weights")
    parser.add_argument("--loader-generator", choices=["own", "global"], default="own",
                        help="own: DataLoader(generator=g); global: no generator argument")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    print(precprobe.seed_all(args.seed, True).summary())

    model = VAE()
    if args.load_state:
        precprobe.load_state(model, args.load_state)
    if args.save_state:
        precprobe.save_state(model, args.save_state)
    torch.manual_seed(args.seed)

    train_set = datasets.FashionMNIST(args.data, train=True, download=False,
                                      transform=transforms.ToTensor())
    if args.loader_generator == "own":
        g = torch.Generator()
        g.manual_seed(args.seed)
        train_loader = DataLoader(train_set, batch_size=64, shuffle=False, num_workers=0,
                                  generator=g)
    else:
        train_loader = DataLoader(train_set, batch_size=64, shuffle=False, num_workers=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    dbg = None
    if args.dump:
        dbg = precprobe.PrecisionDebugger(args.config or None, dump_path=args.dump, overwrite=True)
        dbg.start(model)

    model.train()
    for i, (data, _) in enumerate(train_loader):
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar) / data.size(0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if dbg is not None:
            dbg.step()
        print(f"step {i} loss {loss.item():.6f}")
        if i + 1 >= args.steps:
            break

    if dbg is not None:
        dbg.stop()
        c = dbg.counters()
        print(f"precprobe: {c['ops_recorded']} op records, {c['records_dropped']} dropped, "
              f"{c['errors']} errors -> {args.dump}")


if __name__ == "__main__":
    main()
