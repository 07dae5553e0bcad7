"""edgecost for PyTorch: plan a training step's memory with edgecost, then apply the plan.

    import edgecost.torch
    plan = edgecost.torch.plan(model, example_batch, activation_budget="50%", runtime_budget="1.5x")
    model = plan.apply(model)
"""

from edgecost.schedule import NodeDecision, Schedule  # noqa: F401

__all__ = ["NodeDecision", "Schedule"]


def __getattr__(name):
    # `import edgecost` then `edgecost.torch.plan(...)`, without importing PyTorch until then.
    if name == "torch":
        import importlib
        return importlib.import_module("edgecost.torch")
    raise AttributeError(name)
