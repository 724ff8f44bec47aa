"""Jobs against the PyTorch DataLoader: the S1-S6 scenarios."""
