"""What of a plan PyTorch can run: recomputation is checkpointing whole modules, paging is
writing a module's output when autograd saves it. A plan's choices are per graph node; this
maps each to the nearest choice that modules can express and says which ones moved."""

from collections import defaultdict
from dataclasses import dataclass, field

from edgecost.schedule import KEEP, PAGE, RECOMPUTE


def _ancestors(name, modules):
    """`name` and its enclosing modules, innermost first, without the root ("")."""
    parts = name.split(".") if name else []
    found = []
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            found.append(candidate)
    return found


@dataclass
class Realization:
    segments: list                 # modules run under torch.utils.checkpoint, outermost only, in node order
    paged_modules: list            # modules whose output is paged when autograd saves it
    actions: dict                  # forward node -> KEEP, RECOMPUTE or PAGE as it runs
    notes: list = field(default_factory=list)  # choices that moved, in words
    segment_nodes: list = field(default_factory=list)  # per segment, the forward nodes it computes, in order

    def moved(self, schedule):
        """Forward nodes whose realized action differs from the plan's (the batch left out)."""
        return [d for d in schedule.forward() if not d.is_input and self.actions[d.node] != d.action]


def _child_index(name, modules):
    """(parent, index) when `name` is a child of an nn.Sequential, else None."""
    import torch.nn as nn
    parent, _, child = name.rpartition(".")
    container = modules.get(parent)
    if isinstance(container, nn.Sequential) and child.isdigit():
        return parent, int(child)
    return None


@dataclass(frozen=True)
class Segment:
    """A module run under checkpointing, or a run of consecutive children of an nn.Sequential."""
    module: str
    first: int = -1  # -1: the whole module
    last: int = -1

    def covers(self):
        if self.first < 0:
            return [self.module]
        return [f"{self.module}.{i}" if self.module else str(i) for i in range(self.first, self.last + 1)]

    def __str__(self):
        return self.module if self.first < 0 else f"{self.module}[{self.first}:{self.last + 1}]"


def realize(schedule, modules):
    """`modules`: the model's named_modules() as a dict."""
    forward = [d for d in schedule.forward()]
    by_node = {d.node: d for d in forward}
    members = defaultdict(list)  # module -> the forward nodes it computes
    for d in forward:
        for module in _ancestors(d.module, modules):
            members[module].append(d.node)
    output_node = {m: max(nodes) for m, nodes in members.items()}  # a module's output: its last node
    notes = []

    def segment_members(segment):
        return sorted({n for m in segment.covers() for n in members.get(m, [])})

    def enclosing_segment(d):
        # The smallest module, or pair of consecutive Sequential children, that computes d but
        # does not end with it: checkpointing it drops d's output after the forward and computes
        # it again in backward (what a checkpointed part returns is saved by its callers).
        for module in _ancestors(d.module, modules):
            if output_node[module] != d.node:
                return Segment(module)
            place = _child_index(module, modules)
            if place and f"{place[0]}.{place[1] + 1}".lstrip(".") in modules:
                return Segment(place[0], place[1], place[1] + 1)
        return None

    def module_output_of(d):
        return d.module if d.module in modules and output_node.get(d.module) == d.node else None

    segments, paged = set(), set()
    for d in forward:
        if d.is_input or d.action == KEEP:
            continue
        if d.action == RECOMPUTE:
            segment = enclosing_segment(d)
            if segment:
                segments.add(segment)
            elif module_output_of(d):
                paged.add(d.module)
                notes.append(f"{d.describe()}: no module computes it inside, so it is paged instead")
            else:
                notes.append(f"{d.describe()}: no module computes it, so it is kept")
        else:  # PAGE
            if module_output_of(d):
                paged.add(d.module)
                continue
            segment = enclosing_segment(d)
            if segment:
                segments.add(segment)
                notes.append(f"{d.describe()}: not a module's output, so it is recomputed inside {segment}")
            else:
                notes.append(f"{d.describe()}: not a module's output, so it is kept")

    # Overlapping runs of one Sequential become one run.
    merged = {s for s in segments if s.first < 0}
    runs = defaultdict(list)
    for s in segments:
        if s.first >= 0:
            runs[s.module].append([s.first, s.last])
    for parent, spans in runs.items():
        spans.sort()
        joined = [spans[0]]
        for first, last in spans[1:]:
            if first <= joined[-1][1]:
                joined[-1][1] = max(joined[-1][1], last)
            else:
                joined.append([first, last])
        merged |= {Segment(parent, first, last) for first, last in joined}
    # Checkpointing a part checkpoints everything inside it: keep the outermost parts.
    def inside(inner, outer):
        return inner != outer and all(any(a in outer.covers() for a in _ancestors(m, modules)) for m in inner.covers())
    segments = [s for s in merged if not any(inside(s, other) for other in merged)]
    segments.sort(key=lambda s: min(segment_members(s) or [0]))
    recomputed = {n for s in segments for n in segment_members(s)[:-1]}
    segment_inputs = {i for s in segments for n in segment_members(s) for i in by_node[n].inputs
                      if i not in segment_members(s) and i in by_node}
    actions = {}
    for d in forward:
        if d.node in recomputed:
            actions[d.node] = RECOMPUTE
        elif module_output_of(d) in paged and d.node not in segment_inputs:
            actions[d.node] = PAGE
        else:
            actions[d.node] = KEEP
    for d in forward:
        if d.action == PAGE and module_output_of(d) in paged and actions[d.node] != PAGE:
            why = "the input of a checkpointed part, which holds it" if actions[d.node] == KEEP else \
                "inside a checkpointed part"
            notes.append(f"{d.describe()}: {why}, so it is {'kept' if actions[d.node] == KEEP else 'recomputed'}")
    extra = [d for d in forward if not d.is_input and d.action == KEEP and actions[d.node] != KEEP]
    if extra:
        names = sorted({d.module for d in extra})
        notes.append(f"{len(extra)} forward nodes the plan keeps are recomputed as well, because the smallest "
                     f"parts realizing its choices contain them ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})")
    backward_changed = [d for d in schedule.changed() if d.backward]
    if backward_changed:
        notes.append(f"{len(backward_changed)} choices for gradients (backward nodes) are left to autograd, which "
                     "frees each gradient after its last use")
    return Realization(
        segments=segments, paged_modules=sorted(paged), actions=actions, notes=notes,
        segment_nodes=[segment_members(s) for s in segments])


def realized_stages(schedule, realization):
    """The stage schedule (Schedule.stages as protobuf JSON) of what runs in PyTorch, for
    `edgecost check` to replay: every node computed in order; a checkpointed part's nodes dropped
    after the forward and all computed again when backward first reads one of them (non-reentrant
    checkpointing), its inputs held until then; a paged output written after it is computed and
    read back the stage before its first backward use; gradients computed once and kept until
    their last use (autograd's way, whatever the plan said for them)."""
    decisions = schedule.decisions
    n = len(decisions)
    consumers = defaultdict(list)
    for d in decisions:
        for i in d.inputs:
            consumers[i].append(d.node)

    def first_backward_use(nodes):
        uses = [u for v in nodes for u in consumers[v] if decisions[u].backward]
        return min(uses) if uses else None

    compute = [[t] for t in range(n)]
    page_out, page_in = defaultdict(list), defaultdict(list)
    productions = defaultdict(list)  # node -> (stage, place in the stage's compute list); page-ins rank after all
    for t in range(n):
        productions[t].append((t, 0))
    # (nodes, whether readers outside use the recomputed output): a checkpointed part computes its
    # output again too, but what its readers saved is the forward's copy; the batch is read again
    # where the plan reads it again (in PyTorch the caller holds it).
    recompute_groups = [(list(nodes), False) for nodes in realization.segment_nodes]
    recompute_groups += [([d.node], True) for d in decisions if d.is_input and d.action != KEEP]
    for nodes, output_used in recompute_groups:
        stage = first_backward_use(nodes)
        if stage is None:
            continue
        compute[stage][:0] = nodes
        for place, v in enumerate(nodes if output_used else nodes[:-1]):
            productions[v].append((stage, place))
    for d in decisions:
        if d.backward or d.is_input or realization.actions.get(d.node) != PAGE:
            continue
        stage = first_backward_use([d.node])
        if stage is None or stage <= d.node + 2:
            continue
        page_out[d.node + 1].append(d.node)
        page_in[stage - 1].append(d.node)
        productions[d.node].append((stage - 1, n + 1))
    for v in productions:
        productions[v].sort()

    keep = [set() for _ in range(n)]

    def hold(v, stage, place):
        """v must be there for a computation at (stage, place): resident since its latest production."""
        earlier = [p for p in productions[v] if p < (stage, place)]
        if not earlier:
            raise ValueError(f"node {v} is read at stage {stage} before it is computed")
        produced_stage, _ = earlier[-1]
        # Computed or read back at an earlier stage: kept in between; earlier in this stage: nothing.
        for s in range(produced_stage, stage):
            keep[s].add(v)

    for stage in range(n):
        for place, node in enumerate(compute[stage]):
            for v in decisions[node].inputs:
                # A paged output's forward readers use the computed copy, its backward readers the one read back.
                hold(v, stage, place)
        for v in page_out[stage]:
            hold(v, stage, -1)
    on_storage, stages = set(), []
    for t in range(n):
        on_storage |= set(page_out[t])
        stages.append({"compute": compute[t], "keep": sorted(keep[t]), "onStorage": sorted(on_storage),
                       "pageOut": sorted(page_out[t]), "pageIn": sorted(page_in[t])})
    return stages
