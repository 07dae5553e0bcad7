"""A schedule file (`edgecost solve --out`, protobuf JSON of edgecost.v1.Schedule) read as
one decision per training-graph node: kept, recomputed or paged, with its nn.Module name."""

import json
from dataclasses import dataclass, field

KEEP, RECOMPUTE, PAGE = "keep", "recompute", "page"


@dataclass
class NodeDecision:
    node: int
    name: str               # the importer's layer name, e.g. "layer6_ReLU6Layer"
    module: str             # the qualified nn.Module name, e.g. "features.1.conv.0.2"; "" when unknown
    backward: bool
    is_input: bool          # the batch: read again, never recomputed
    action: str             # KEEP, RECOMPUTE or PAGE
    recomputations: int     # extra computations after the first
    output_bytes: int
    runtime_s: float        # one computation, from the cost table the plan was solved on
    inputs: list = field(default_factory=list)

    def describe(self):
        what = {KEEP: "kept", RECOMPUTE: f"recomputed {self.recomputations}x", PAGE: "paged"}[self.action]
        return f"{self.module or '(no module)'} ({self.name}) node {self.node}: {what}"


class Schedule:
    """The parts of a Schedule message the PyTorch side needs, plus the message itself (`raw`)."""

    def __init__(self, message):
        self.raw = message
        table = message.get("costTable") or {}
        nodes = (table.get("graph") or {}).get("nodes") or []
        if not nodes:
            raise ValueError("the schedule carries no cost table: write it with `edgecost solve --out`")
        runtime_by_node = {c.get("node", 0): c.get("runtimeS", 0.0) for c in table.get("costs", [])}
        computed = [0] * len(nodes)
        paged = [False] * len(nodes)
        for stage in message.get("stages", []):
            for i in stage.get("compute", []):
                computed[i] += 1
            for i in stage.get("pageOut", []):
                paged[i] = True
        self.decisions = []
        for i, node in enumerate(nodes):
            recomputations = max(0, computed[i] - 1)
            action = PAGE if paged[i] else RECOMPUTE if recomputations else KEEP
            self.decisions.append(NodeDecision(
                node=i, name=node.get("name", ""), module=node.get("module", ""),
                backward=node.get("phase") == "PHASE_BACKWARD", is_input=not node.get("inputs") and
                node.get("phase") != "PHASE_BACKWARD", action=action, recomputations=recomputations,
                output_bytes=int(node.get("outputBytes", 0)), runtime_s=runtime_by_node.get(i, 0.0),
                inputs=list(node.get("inputs", []))))
        memory = message.get("memory") or {}
        self.status = message.get("status", "")
        self.step_time_s = float(message.get("runtimeS", 0.0))
        self.runtime_budget_s = float(message.get("runtimeBudgetS", 0.0))
        self.peak_bytes = int(message.get("peakRamBytes", 0))
        # The activation budget; files written before the rename call it ramBudgetBytes.
        self.budget_bytes = int(message.get("activationBudgetBytes", message.get("ramBudgetBytes", 0)))
        self.energy_j = float((message.get("energy") or {}).get("totalJ", 0.0))
        self.energy_source = message.get("energySource", "")
        self.plain_activation_peak_bytes = int(memory.get("activationPeakBytes", 0))
        self.plain_step_time_s = sum(d.runtime_s for d in self.decisions)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls(json.load(f))

    def forward(self):
        return [d for d in self.decisions if not d.backward]

    def changed(self):
        """The nodes the plan recomputes or pages (the batch, read again, left out)."""
        return [d for d in self.decisions if d.action != KEEP and not d.is_input]
