"""Shared fixtures: the devices a test runs on (CUDA cases skip, saying why, where there is none)."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


def _cuda_param():
    why = None if torch.cuda.is_available() else "GPU test skipped: torch sees no CUDA device"
    return pytest.param("cuda", marks=pytest.mark.skipif(why is not None, reason=why or ""), id="cuda")


DEVICES = [pytest.param("cpu", id="cpu"), _cuda_param()]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
