"""The Hopper backend's host side: configs and their selection, the launches of the kernels
(pingpong.hopper.kernels), and the backend the runtime asks (backend.py)."""
