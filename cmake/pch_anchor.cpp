// Anchor translation unit of the shared <torch/torch.h> precompiled header.
