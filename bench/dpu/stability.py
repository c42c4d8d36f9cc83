#!/usr/bin/env python3
"""bench/dpu/stability.py: why one step of delay costs Adam so much: the stability threshold of Adam's
momentum with and without the delayed parameter update, on one direction of a quadratic.

Note [Delayed momentum stability]. Take one direction of curvature h and Adam's preconditioner frozen
(so lr / (sqrt(v) + eps) is a constant step size eta), and a = eta * h, the preconditioned sharpness in
units of 1 / eta. Adam's first moment and update on that direction are
    m_t = beta1 * m_{t-1} + (1 - beta1) * a * x_g,      x_t = x_{t-1} - m_t,
where x_g is where the gradient was taken:
  - without delay x_g = x_{t-1}: x_t = (1 + beta1 - (1 - beta1) a) x_{t-1} - beta1 x_{t-2}. The roots of
    z^2 - (1 + beta1 - (1 - beta1) a) z + beta1 stay inside the unit circle up to a root at z = -1, i.e.
    a < 2 (1 + beta1) / (1 - beta1): 38 for beta1 = 0.9 (the "38 / eta" of Cohen et al., "Adaptive
    gradient methods at the edge of stability", 2022).
  - one step stale (Note [Delayed parameter update], zhost/zero/delayed_update.hpp) x_g = x_{t-2}:
    x_t = (1 + beta1) x_{t-1} - (beta1 + (1 - beta1) a) x_{t-2}. The product of the two roots is
    beta1 + (1 - beta1) a, so the iteration is stable only for a < 1, whatever beta1.
So the delay shrinks the sharpness Adam can train at by 2 (1 + beta1) / (1 - beta1): 38x at beta1 = 0.9,
2x at beta1 = 0 (plain preconditioned descent). Training with Adam drives the sharpness up to the threshold
(the edge of stability); with the delay it has to stay in regions 38x flatter, which is the loss the example
job measures (docs/config.md, "Delayed parameter update"). It also bounds what predicting the weights can
do: taking the gradient at the extrapolation x_{t-2} + k (x_{t-2} - x_{t-3}) instead (weights the
background step could write out) raises the threshold to at most about 3 (k = 1.5), printed below.

This script checks the closed forms against the iteration's own matrix (the largest |eigenvalue| below 1,
bisected on a) and prints the thresholds. Usage: stability.py [--beta1 B ...]. Needs numpy only.
"""
import argparse

import numpy as np


def spectral_radius(a, beta1, delay, k=0.0):
    """The largest |eigenvalue| of the iteration above for sharpness a, on the state (x_{t-1}, x_{t-2},
    x_{t-3}, m_{t-1}). delay 0: fresh gradients; 1: one step stale, taken at x_{t-2} + k (x_{t-2} - x_{t-3})."""
    g = np.array([1.0, 0.0, 0.0]) if delay == 0 else np.array([0.0, 1.0 + k, -k])  # x_g from (x1, x2, x3)
    m_row = np.concatenate([(1 - beta1) * a * g, [beta1]])  # m_t
    x_row = np.concatenate([[1.0, 0.0, 0.0], [0.0]]) - m_row  # x_t = x_{t-1} - m_t
    step = np.array([x_row, [1, 0, 0, 0], [0, 1, 0, 0], m_row])
    return max(abs(np.linalg.eigvals(step)))


def threshold(beta1, delay, k=0.0):
    """The largest stable a: bisection on the spectral radius (below 1 under the threshold, above it over)."""
    low, high = 0.0, 1000.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if spectral_radius(middle, beta1, delay, k) < 1 else (low, middle)
    return low


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--beta1", type=float, nargs="+", default=[0.0, 0.5, 0.9, 0.95])
    args = parser.parse_args()
    print("beta1  no delay (2(1+b)/(1-b) | matrix)  one step stale (1 | matrix)  ratio  "
          "extrapolated k=1 | k=1.5")
    for beta1 in args.beta1:
        fresh, stale = threshold(beta1, 0), threshold(beta1, 1)
        print(f"{beta1:5.2f}  {2 * (1 + beta1) / (1 - beta1):8.3f} | {fresh:8.3f}            "
              f"{1.0:5.3f} | {stale:6.3f}              {fresh / stale:5.1f}  "
              f"{threshold(beta1, 1, 1.0):6.3f} | {threshold(beta1, 1, 1.5):6.3f}")


if __name__ == "__main__":
    main()
