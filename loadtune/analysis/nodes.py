"""A node's summary of a multi-node scan: the row node 0 prints for it in the per-node table."""

from __future__ import annotations

from loadtune.model.results import ScanResult


def node_summary(result: ScanResult, node_rank: int, host: str) -> dict:
    """This node's pick and its rates; a plain dict, since it travels to node 0 as JSON through the
    rendezvous store (``engine.distributed.layout.gather_summaries``). Empty figures without a pick."""
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec else None
    return {
        "node_rank": node_rank,
        "host": host,
        "cores": result.machine.usable_cores,
        "pick": rec.config.label() if rec else None,
        "samples_per_s": pick.estimate.median if pick else None,
        "sum_per_s": pick.aggregate_rate if pick else None,
        "workers": rec.config.num_workers * pick.ranks if pick else None,
    }
