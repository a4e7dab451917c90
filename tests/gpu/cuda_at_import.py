"""A module that initialises CUDA when imported: a fork server preloading it as the warm
module must be refused by its jobs. Run as ``__main__`` it only says it ran."""

import torch

torch.cuda.init()

if __name__ == "__main__":
    print("ran on", torch.cuda.get_device_name())
