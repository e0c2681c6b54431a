"""The source of a user's own model file, as the code-door tests write it to disk (``Net`` and
``build_model``: a small conv trunk with max pooling and a linear embedding)."""

USER_MODELS = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU())
        self.fc = nn.Linear(16, dim)

    def forward(self, x):
        return self.fc(torch.amax(self.trunk(x), dim=(2, 3)))


def build_model(dim=8):
    return Net(dim)
'''
