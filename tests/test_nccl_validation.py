"""Real nccl-tests logs in: the reader, the `topoplan nccl` command, and docs/validation.md held current."""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest
from click.testing import CliRunner

from topoplan.cli import main
from topoplan.errors import SpecError
from topoplan.nccltests import read_log

from conftest import ROOT

LOGS = ROOT / "tests" / "fixtures" / "nccl-tests"


def _validation():
    spec = importlib.util.spec_from_file_location("nccl_validation", ROOT / "benchmarks" / "nccl_validation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["nccl_validation"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


VALIDATION = _validation()


# (file, op, ranks, hosts, rows, largest size, its out-of-place busbw), read off the logs by eye
LOG_FACTS = [
    ("a100-sxm4-80gb-1node-8gpu-allreduce.txt", "allreduce", 8, 1, 25, 134217728, 181.32),
    ("aws-p5-2node-allreduce.txt", None, None, None, 32, 17179869184, 487.09),   # table only, "0: " prefixes
    ("coreweave-gb200-20rack-allreduce.txt", "allreduce", 1440, 1, 6, 17179869184, 405.74),
    ("dgx-h100-2node-4gpu-allreduce.txt", "allreduce", 8, 2, 31, 8589934592, 328.29),
    ("gcp-a3mega-h100-2node-allreduce.txt", "allreduce", 16, 2, 31, 8589934592, 338.82),
]


@pytest.mark.parametrize("name, op, ranks, hosts, rows, largest, busbw", LOG_FACTS)
def test_real_logs_are_read(name, op, ranks, hosts, rows, largest, busbw):
    log = read_log(str(LOGS / name))
    assert (log.op, log.ranks, log.hosts, len(log.rows)) == (op, ranks, hosts, rows)
    assert (log.rows[-1].size_bytes, log.rows[-1].busbw_GBps) == (largest, busbw)


def test_every_fixture_log_is_a_validation_case():
    assert sorted(c.log for c in VALIDATION.CASES) == sorted(p.name for p in LOGS.glob("*.txt"))


def test_validation_doc_is_current():
    text = VALIDATION.markdown([VALIDATION.evaluate(c) for c in VALIDATION.CASES])
    assert (ROOT / "docs" / "validation.md").read_text() == text, \
        "regenerate with: python benchmarks/nccl_validation.py --markdown docs/validation.md"


@pytest.mark.parametrize("case", [c for c in VALIDATION.CASES if c.spec is not None], ids=lambda c: c.log)
@pytest.mark.xfail(strict=True, reason="NCCL's model is optimistic between 64 MiB and 1 GiB against these logs; "
                   "docs/validation.md says by how much and why. Strict: a model change that meets the target "
                   "must update the doc.")
def test_median_error_from_64_mib_is_within_15_percent(case):
    result = VALIDATION.evaluate(case)
    assert result["summary"]["median_abs_error"] <= VALIDATION.TARGET


def test_predictions_are_optimistic_not_random():
    """The misses have one sign: topoplan's (NCCL's) model is never slower than these machines from 64 MiB."""
    for case in VALIDATION.CASES:
        if case.spec is None:
            continue
        sweep = VALIDATION.evaluate(case)["sweep"]
        assert all(r.error > 0 for r in sweep.rows if r.size_bytes >= VALIDATION.FROM_BYTES), case.log


# --- the command -----------------------------------------------------------------------------------------

def test_nccl_sweep_prints_nccl_tests_columns(in_root):
    result = CliRunner().invoke(main, ["nccl", "designs/fat-tree-1k.yaml", "--group", "tp", "-b", "8", "-e", "1G",
                                       "-f", "4"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines() if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [8 * 4**i for i in range(14)]   # 8 B to 512 MiB
    assert all(r[2:5] == ["float", "sum", "-1"] and int(r[1]) == int(r[0]) // 4 for r in rows)
    for r in rows:  # busbw = algbw x 2(n-1)/n with n = 8, and algbw = size / time
        size, time_us, algbw, busbw = int(r[0]), float(r[5]), float(r[6]), float(r[7])
        assert algbw == pytest.approx(size / time_us / 1e3, rel=2e-3, abs=0.006)   # columns rounded to 0.01
        assert busbw == pytest.approx(algbw * 1.75, rel=2e-3, abs=0.02)
    assert rows[-1][8] == "nvls/Simple" and rows[0][8].endswith("/LL")


def test_nccl_measured_puts_the_log_beside_the_prediction(in_root, tmp_path):
    spec = tmp_path / "a3.yaml"
    spec.write_text(json.dumps(VALIDATION.CASES[2].spec))
    log = LOGS / VALIDATION.CASES[2].log
    result = CliRunner().invoke(main, ["nccl", str(spec), "--measured", str(log), "--format", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["rows"]) == 31 and data["rows"][-1]["measured_busbw_GBps"] == 338.82
    assert data["summary"]["sizes"] == 14   # sizes from 1 MiB to 8 GiB
    markdown = CliRunner().invoke(main, ["nccl", str(spec), "--measured", str(log), "--format", "markdown"])
    assert "**Summary:**" in markdown.stdout and "| 8,589,934,592 |" in markdown.stdout


@pytest.mark.parametrize("text, message", [
    ("", "no nccl-tests result rows"),
    ("hello\nworld\n", "no nccl-tests result rows"),
    ("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "   1024  256  float  sum  -1  12.1  0.08\n", "fewer than the 13"),
    ("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "   1024  256  float  sum  -1  x  0.08  0.1  0  12 0.1 0.1 0\n", "do not parse"),
    ("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "   1024  256  float  sum  -1  0  0.08  0.1  0  12 0.1 0.1 0\n", "not a positive number"),
    ('{"results": 3}', "without a 'results' list"),
    ('{"results": [{"size": 8}]}', "lacks size"),
])
def test_bad_logs_are_refused_with_file_and_line(tmp_path, text, message):
    path = tmp_path / "log.txt"
    path.write_text(text)
    with pytest.raises(SpecError, match=re.escape(message)):
        read_log(str(path))
    result = CliRunner().invoke(main, ["nccl", str(ROOT / "designs/fat-tree-1k.yaml"), "--measured", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(str(path))


def test_nccl_refuses_bad_options(in_root):
    runner = CliRunner()
    for args, message in ((["--op", "all_reduc"], "did you mean 'all_reduce'"),
                          (["--group", "dpp"], "unknown group"), (["--algorithm", "nvls", "--op", "all_gather"],
                                                                  "no 'nvls' algorithm"),
                          (["-f", "1"], "never grows"), (["-b", "1G", "-e", "8"], "not a range"),
                          (["-e", "lots"], "Invalid value")):
        result = runner.invoke(main, ["nccl", "designs/fat-tree-1k.yaml", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr, (args, result.stderr)


def test_a_log_of_another_collective_is_refused(in_root):
    result = CliRunner().invoke(main, ["nccl", "designs/fat-tree-1k.yaml", "--op", "all_gather", "--measured",
                                       str(LOGS / LOG_FACTS[0][0])])
    assert result.exit_code == 2 and "the log measured allreduce, not allgather" in result.stderr


def test_fit_writes_a_catalog_override_that_brings_the_prediction_closer(in_root, tmp_path):
    """Calibration, not validation: fitted to the same log it is then held against."""
    from topoplan.catalog import load_catalog

    spec = tmp_path / "a100.yaml"
    spec.write_text(json.dumps(VALIDATION.CASES[0].spec))
    log = str(LOGS / VALIDATION.CASES[0].log)
    override = tmp_path / "calibrated.yaml"
    runner = CliRunner()
    fitted = runner.invoke(main, ["nccl", str(spec), "--measured", log, "--fit", str(override), "--format", "json"])
    assert fitted.exit_code == 0, fitted.output
    assert "fitted hgx-a100" in fitted.stderr and "pass it with --catalog" in fitted.stderr
    server = load_catalog([str(override)]).servers["hgx-a100"]
    assert server.intra_step_extra_us > 0 and 0 < server.bandwidth_efficiency < 1
    assert server.network_step_extra_us == 0   # one node: the log cannot tell network steps apart
    before = runner.invoke(main, ["nccl", str(spec), "--measured", log, "--format", "json"])
    after = json.loads(fitted.stdout)["summary"]["median_abs_error"]
    assert after < json.loads(before.stdout)["summary"]["median_abs_error"] / 2


def test_fit_needs_one_log(in_root, tmp_path):
    result = CliRunner().invoke(main, ["nccl", "designs/fat-tree-1k.yaml", "--fit", str(tmp_path / "x.yaml")])
    assert result.exit_code == 2 and "--fit needs exactly one --measured log" in result.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_unchecked_and_nan_values_in_a_log_stay_out_of_the_error(in_root, tmp_path):
    """A row whose busbw is N/A or nan is kept, shown as no measurement, and left out of the summary; the
    JSON stays valid JSON."""
    log = tmp_path / "log.txt"
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    log.write_text(header + "     1048576        262144     float     sum      -1    100.0   10.49     nan      0    100.0   10.49   18.35      0\n"
                   "     2097152        524288     float     sum      -1    150.0   13.98   24.47      0    150.0   13.98   24.47      0\n")
    result = CliRunner().invoke(main, ["nccl", "designs/fat-tree-1k.yaml", "--group", "tp", "--measured", str(log),
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    def no_constants(token):
        raise AssertionError(f"{token} is not JSON")

    data = json.loads(result.stdout, parse_constant=no_constants)
    assert data["rows"][0]["measured_busbw_GBps"] is None and data["rows"][0]["error"] is None
    assert data["summary"]["sizes"] == 1


def test_the_straight_line_reading_recovers_a_line_and_the_models_asymptote():
    """``straight_line`` on an exact line gives its two numbers back; on NCCL's own closed form for a
    2-node, 16-rank ring AllReduce (Simple) with a nominal 400 GB/s bus bandwidth, the sustained busbw it
    reads is those 400 GB/s (ring busbw = nChannels x bw), and the fixed cost is the ring's latency."""
    from topoplan.flow import nccl

    sizes = [2**k for k in range(26, 34)]
    fixed, rate, residual = VALIDATION.straight_line(sizes, [250 + s * 1.5 / 300e3 for s in sizes], 1.5)
    assert fixed == pytest.approx(250) and rate == pytest.approx(300) and residual < 1e-9

    shape = nccl.GroupShape(16, 2, "nvlink", 16, "hopper")
    times = [nccl.nccl_model_time_s("allreduce", "ring", "Simple", shape, s, 400.0) * 1e6 for s in sizes]
    fixed, rate, residual = VALIDATION.straight_line(sizes, times, 2 * 15 / 16)
    assert rate == pytest.approx(400.0, rel=1e-9) and residual < 1e-9
    assert fixed == pytest.approx(nccl.ring_latency_us("allreduce", "Simple", shape), rel=1e-6)
