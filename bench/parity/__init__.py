"""Convergence parity of joaderfs's augmentation with torchvision's."""
