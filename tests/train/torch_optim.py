#!/usr/bin/python3
"""PyTorch's own training from edgecost's weights and batches: the optimizer and learning-rate
schedule reference for tests/train/optimizer_test.cc.

Usage: /usr/bin/python3 tests/train/torch_optim.py MODEL CONFIG IN_FILE OUT_FILE

MODEL is a name from tests/graph/export_models.py. CONFIG is JSON: {"optimizer": "sgd"|"adam"|
"adamw", the keyword arguments of torch.optim.SGD/Adam/AdamW ("lr", "momentum", "weight_decay",
"betas", ...), "schedule": "none"|"step"|"cosine", "step_size", "gamma", "t_max", "eta_min",
"warmup_steps", "steps"}. IN_FILE holds the model's parameters in model.parameters() order (which
is the order edgecost's executor lists its trained ones), then each step's input and labels;
OUT_FILE gets the parameters after the steps, in the same order, then the learning rate each step
used, then each parameter's largest absolute gradient at the first step. Both files are sequences of tensors, each a little-endian uint32 element count followed by
that many float32 values. Training runs in float64 (the loss mean-reduced, as
nn.CrossEntropyLoss), so the reference's own rounding is negligible against edgecost's float32.
The warm-up is LinearLR(start_factor=1/(W+1), total_iters=W) and SequentialLR hands over to
StepLR or CosineAnnealingLR at step W. Exit status 3: no PyTorch.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "graph"))
import export_models  # noqa: E402  (exits 3 without PyTorch)
import torch  # noqa: E402
from torch.optim import lr_scheduler  # noqa: E402
from torch_gradients import read_tensors, write_tensors  # noqa: E402


def make_optimizer(config, params):
    kind = config["optimizer"]
    names = {"sgd": ("lr", "momentum", "dampening", "nesterov", "weight_decay"),
             "adam": ("lr", "betas", "eps", "weight_decay"),
             "adamw": ("lr", "betas", "eps", "weight_decay")}[kind]
    kwargs = {k: (tuple(v) if k == "betas" else v) for k, v in config.items() if k in names}
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind]
    return cls(params, **kwargs)


def make_schedule(config, optimizer):
    kind, warmup = config.get("schedule", "none"), config.get("warmup_steps", 0)
    main = None
    if kind == "step":
        main = lr_scheduler.StepLR(optimizer, step_size=config["step_size"], gamma=config.get("gamma", 0.1))
    elif kind == "cosine":
        main = lr_scheduler.CosineAnnealingLR(optimizer, T_max=config["t_max"], eta_min=config.get("eta_min", 0))
    if warmup == 0:
        return main
    warm = lr_scheduler.LinearLR(optimizer, start_factor=1 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    if main is None:
        return warm
    return lr_scheduler.SequentialLR(optimizer, [warm, main], milestones=[warmup])


def main():
    name, config_text, in_path, out_path = sys.argv[1:5]
    config = json.loads(config_text)
    torch.set_num_threads(1)
    make, example = export_models.MODELS[name]
    torch.manual_seed(0)
    model = make().double()
    model.train()
    params = list(model.parameters())
    tensors = read_tensors(in_path)
    steps = config["steps"]
    if len(tensors) != len(params) + 2 * steps:
        sys.exit(f"{in_path} has {len(tensors)} tensors; {name} has {len(params)} parameters, then {steps} batches")
    for i, (p, t) in enumerate(zip(params, tensors)):
        if p.numel() != t.numel():
            sys.exit(f"parameter {i} of {name} has shape {tuple(p.shape)}; edgecost's has {t.numel()} elements")
        p.data.copy_(t.reshape(p.shape))
    optimizer = make_optimizer(config, params)
    schedule = make_schedule(config, optimizer)
    shape = example().shape
    lrs, first_gradients = [], None
    for step in range(steps):
        x = tensors[len(params) + 2 * step].reshape(-1, *shape[1:])
        labels = tensors[len(params) + 2 * step + 1].round().long()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), labels).backward()
        lrs.append(optimizer.param_groups[0]["lr"])
        if first_gradients is None:
            first_gradients = [p.grad.abs().max().item() for p in params]
        optimizer.step()
        if schedule is not None:
            schedule.step()
    write_tensors(out_path, params + [torch.tensor(lrs), torch.tensor(first_gradients)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
