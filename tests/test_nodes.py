"""A node's summary of a multi-node scan (``analysis.nodes``): pure, on a saved real scan."""

import json

from conftest import FIXTURES

from loadtune.analysis.nodes import node_summary
from loadtune.model.results import ScanResult


def test_a_nodes_summary_is_its_pick_and_rates_as_plain_json():
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    summary = node_summary(result, 1, "node-b")
    pick = result.config_result(result.recommendation.config)
    assert summary == {"node_rank": 1, "host": "node-b", "cores": result.machine.usable_cores, "pick": "w0 bs32",
                       "samples_per_s": pick.estimate.median, "sum_per_s": pick.aggregate_rate, "workers": 0}
    assert json.loads(json.dumps(summary)) == summary  # it travels to node 0 through the store as JSON


def test_a_node_without_a_pick_sends_empty_figures():
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    result.recommendation = None
    summary = node_summary(result, 0, "node-a")
    assert (summary["pick"], summary["samples_per_s"], summary["sum_per_s"], summary["workers"]) == (None, None, None, None)
