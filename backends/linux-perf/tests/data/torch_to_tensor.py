"""A torch op for the symbolization comparison with perf: torchvision's
ToTensor then Normalize on the sample JPEG, one intra-op thread (as in a
DataLoader worker), so the samples land in ATen's kernels (C++ names)."""

import os

import torch
import torchvision.transforms as T
from PIL import Image

torch.set_num_threads(1)
SAMPLE_JPEG = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "fixtures", "images", "sample.jpg"
)
_to_tensor = T.ToTensor()
_normalize = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def setup():
    with Image.open(SAMPLE_JPEG) as img:
        return img.convert("RGB")


def op(img):
    return _normalize(_to_tensor(img))
