import numpy as np
from oracle import check_node


def test_identity_runs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_node("Identity", {"x": x}, opset=13)
