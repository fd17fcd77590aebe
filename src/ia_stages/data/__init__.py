"""Images in: generators of the synthetic and digit datasets, shapes rendered from outlines, and
readers of the official MNIST/affNIST files and of users' own images."""
