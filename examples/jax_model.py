"""The JAX recipes' model and checkpoint (jax_resume.py, grain_resume.py):
a small convolution trained by SGD, and one file holding its parameters
with the input's state, so that a rerun resumes both together."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np


def init_params(classes: int) -> dict:
    key = jax.random.key(0)
    return {"conv": 0.1 * jax.random.normal(key, (3, 3, 3, 8)),
            "w": jnp.zeros((8, classes)), "b": jnp.zeros(classes)}


@jax.jit
def train_step(params, images, labels):
    """One SGD step of a 3x3 convolution, pooled, then a linear layer."""
    def loss(params):
        x = images.astype(jnp.float32) / 255.0
        x = jax.lax.conv_general_dilated(
            x, params["conv"], window_strides=(2, 2), padding="VALID",
            dimension_numbers=("NHWC", "HWIO", "NHWC"))
        x = jax.nn.relu(x).mean(axis=(1, 2))
        logits = x @ params["w"] + params["b"]
        return -jnp.mean(jnp.take_along_axis(
            jax.nn.log_softmax(logits), labels[:, None], axis=1))
    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def save(path: Path, params, input_state: dict) -> None:
    """The parameters and the input's state (JSON), in one file: a crash
    leaves the old checkpoint or the new one, never half of each."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        np.savez(f, input_state=json.dumps(input_state),
                 **{k: np.asarray(v) for k, v in params.items()})
    os.replace(temporary, path)


def load(path: Path):
    """(params, input_state) as save() wrote them."""
    with np.load(path) as saved:
        input_state = json.loads(str(saved["input_state"]))
        params = {k: jnp.asarray(saved[k]) for k in saved.files
                  if k != "input_state"}
    return params, input_state
