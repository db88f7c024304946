"""heterocc.torch: torch modules through torch's ONNX export, and a torch.compile backend,
checked against eager PyTorch. Skipped where torch is not installed (it is the optional
extra heterocc[torch]); the ONNX path under it is tested without torch everywhere."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import heterocc.torch as htorch  # noqa: E402


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))) + 1.0
        return self.fc(y.mean(dim=(2, 3))), y.amax(dim=1)


def test_compile_matches_eager_with_several_outputs():
    torch.manual_seed(0)
    net = SmallNet().eval()
    x = torch.randn(2, 3, 12, 12)
    fast = htorch.compile(net, (x,), target="llvm")
    expected = net(x)
    got = fast(x)
    assert isinstance(got, tuple) and len(got) == 2
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_torch_compile_backend_matches_eager():
    torch.manual_seed(0)
    net = SmallNet().eval()
    x = torch.randn(1, 3, 10, 10)
    torch._dynamo.reset()
    opt = torch.compile(net, backend=htorch.backend)
    with torch.no_grad():
        for g, e in zip(opt(x), net(x)):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_torchvision_resnet18_matches_eager():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    fast = htorch.compile(model, (x,), target="llvm")
    with torch.no_grad():
        expected = model(x).numpy()
    got = fast(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
    assert (got.argmax(1) == expected.argmax(1)).all()


def test_the_backend_is_registered_with_dynamo_by_name():
    from importlib import metadata

    names = [ep.name for ep in metadata.entry_points(group="torch_dynamo_backends")]
    assert "heterocc" in names  # pyproject's entry point, for backend="heterocc"
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU()).eval()
    x = torch.randn(3, 6)
    torch._dynamo.reset()
    opt = torch.compile(net, backend="heterocc")
    with torch.no_grad():
        np.testing.assert_allclose(opt(x).numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
