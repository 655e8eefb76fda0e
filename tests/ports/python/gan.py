#!/usr/bin/env python3
"""Fashion-MNIST GAN with fully connected networks (as the pytorch-tutorial's generative
adversarial network): a generator and a discriminator, each an nn.Sequential, two Adam
optimizers, noise drawn each step, BCELoss.

The PyTorch original of the `gan` port pair (tests/ports/README.md). As the tutorial does,
the discriminator's step reads the generated images without detaching them, and both
optimizers' gradients are reset (`reset_grad()`: d_optimizer.zero_grad();
g_optimizer.zero_grad()) before each backward. The other zeroing schedules (the issue's
`set_to_none` either way, or zeroing after each step instead of before each backward) train
the same and are chosen with --set-to-none and --zero-grad.

    PYTHONPATH=build/python /usr/bin/python3 tests/ports/python/gan.py --data ROOT \\
        --save-state init.safetensors --dump py_dump
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

import precprobe

LATENT_SIZE = 64
HIDDEN_SIZE = 256
IMAGE_SIZE = 784
BATCH_SIZE = 64


def main():
    parser = argparse.ArgumentParser(description="Fashion-MNIST GAN (port pair: gan)")
    parser.add_argument("--data", default="data", help="torchvision root (ROOT/FashionMNIST/raw)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--dump", help="record with precprobe into this directory")
    parser.add_argument("--config", help="msprobe config.json for the debugger")
    parser.add_argument("--save-state", help="write the initial weights here")
    parser.add_argument("--load-state", help="start from these weights")
    parser.add_argument("--zero-grad", choices=["before-backward", "after-step"],
                        default="before-backward",
                        help="reset both optimizers' gradients before each backward (the "
                             "tutorial) or after each optimizer step")
    parser.add_argument("--set-to-none", choices=["default", "true", "false"], default="default",
                        help="zero_grad()'s set_to_none: the library's default (False before "
                             "PyTorch 2.0, True since), or given")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    print(precprobe.seed_all(args.seed, True).summary())

    # Discriminator and generator
    D = nn.Sequential(
        nn.Linear(IMAGE_SIZE, HIDDEN_SIZE),
        nn.LeakyReLU(0.2),
        nn.Linear(HIDDEN_SIZE, 1),
        nn.Sigmoid())
    G = nn.Sequential(
        nn.Linear(LATENT_SIZE, HIDDEN_SIZE),
        nn.LeakyReLU(0.2),
        nn.Linear(HIDDEN_SIZE, IMAGE_SIZE),
        nn.Tanh())
    models = nn.ModuleDict({"G": G, "D": D})  # parameter names "G.0.weight", "D.2.bias"
    if args.load_state:
        precprobe.load_state(models, args.load_state)
    if args.save_state:
        precprobe.save_state(models, args.save_state)
    torch.manual_seed(args.seed)

    # Images normalized to [-1, 1], the range of the generator's tanh
    transform = transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize(mean=(0.5,), std=(0.5,)),
    ])
    mnist = datasets.FashionMNIST(args.data, train=True, download=False, transform=transform)
    g = torch.Generator()
    g.manual_seed(args.seed)
    data_loader = DataLoader(mnist, batch_size=BATCH_SIZE, shuffle=False, num_workers=0,
                             generator=g)

    criterion = nn.BCELoss()
    d_optimizer = torch.optim.Adam(D.parameters(), lr=args.lr, betas=(0.5, 0.999))
    g_optimizer = torch.optim.Adam(G.parameters(), lr=args.lr, betas=(0.5, 0.999))

    def reset_grad():
        if args.set_to_none == "default":
            d_optimizer.zero_grad()
            g_optimizer.zero_grad()
        else:
            d_optimizer.zero_grad(set_to_none=args.set_to_none == "true")
            g_optimizer.zero_grad(set_to_none=args.set_to_none == "true")

    before = args.zero_grad == "before-backward"

    dbg = None
    if args.dump:
        dbg = precprobe.PrecisionDebugger(args.config or None, dump_path=args.dump, overwrite=True)
        dbg.start({"G": G, "D": D})

    for i, (images, _) in enumerate(data_loader):
        images = images.reshape(BATCH_SIZE, -1)

        # Create the labels which are later used as input for the BCE loss
        real_labels = torch.ones(BATCH_SIZE, 1)
        fake_labels = torch.zeros(BATCH_SIZE, 1)

        # ================================================================== #
        #                      Train the discriminator                       #
        # ================================================================== #

        # BCE_Loss(x, y) = -y * log(D(x)) - (1 - y) * log(1 - D(x)); real images: y = 1
        outputs = D(images)
        d_loss_real = criterion(outputs, real_labels)

        # Compute the loss with fake images: y = 0
        z = torch.randn(BATCH_SIZE, LATENT_SIZE)
        fake_images = G(z)
        outputs = D(fake_images)
        d_loss_fake = criterion(outputs, fake_labels)

        # Backprop and optimize
        d_loss = d_loss_real + d_loss_fake
        if before:
            reset_grad()
        d_loss.backward()
        d_optimizer.step()
        if not before:
            reset_grad()

        # ================================================================== #
        #                        Train the generator                         #
        # ================================================================== #

        # Compute the loss with fake images; train G to maximize log(D(G(z))) instead of
        # minimizing log(1 - D(G(z)))
        z = torch.randn(BATCH_SIZE, LATENT_SIZE)
        fake_images = G(z)
        outputs = D(fake_images)
        g_loss = criterion(outputs, real_labels)

        # Backprop and optimize
        if before:
            reset_grad()
        g_loss.backward()
        g_optimizer.step()
        if not before:
            reset_grad()

        if dbg is not None:
            dbg.step()
        print(f"step {i} d_loss {d_loss.item():.6f} g_loss {g_loss.item():.6f}")
        if i + 1 >= args.steps:
            break

    if dbg is not None:
        dbg.stop()
        c = dbg.counters()
        print(f"precprobe: {c['ops_recorded']} op records, {c['records_dropped']} dropped, "
              f"{c['errors']} errors -> {args.dump}")


if __name__ == "__main__":
    main()
