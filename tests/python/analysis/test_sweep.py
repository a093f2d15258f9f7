"""distir sweep: one pipeline run, a row per device count whose numbers equal the analysis of the
specialized module and a hand count; JSON, PNG, --build and the errors."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

import distir
from distir import examples
from distir.analysis import comm_volume, memory_footprint
from distir.analysis.sweep import parse_counts, sweep
from distir.cli import main as distir_main
from distir.cli.sweep import human_bytes, human_rate, human_seconds
from distir.driver import tvm_builder
from distir.errors import DistirError
from distir.transform.pipelines import distribute_pipeline
from distir.transform.specialize import specialize

HIDDEN = 384  # divides by 1, 2, 3, 4 and 8


@pytest.fixture
def mlp_file(tmp_path: Path) -> Path:
    p = tmp_path / "mlp.py"
    p.write_text(examples.text("mlp").replace("512", str(HIDDEN)))
    return p


def hand_params(w: int) -> int:
    return 128 * 256 * 4 + 2 * 256 * -(-HIDDEN // w) * 4  # x whole, w1 and w2 a block of ceil(HIDDEN / w)


def hand_sent_per_worker(w: int) -> Fraction:
    return Fraction(2 * (w - 1) * 128 * 256 * 4, w)  # one ring all-reduce of y


def test_rows_equal_the_analysis_of_each_specialized_module(mlp_file):
    mod = distir.parse(mlp_file.read_text())
    seen = []
    result = sweep(mod, [1, 2, 3, 4, 8], on_row=lambda r: seen.append(r.num_workers))
    assert seen == [1, 2, 3, 4, 8]
    local = distribute_pipeline()(mod)
    for row in result.rows:
        specialized = specialize(local, {"num_workers": row.num_workers})
        comm, mem = comm_volume(specialized).evaluate(), memory_footprint(specialized).evaluate()
        assert row.error is None
        assert (row.param_bytes, row.peak_bytes, row.peak_at) == (mem.param_bytes, mem.peak_bytes, mem.peak_at)
        assert row.comm_bytes_per_worker == comm.bytes_per_worker and row.comm_total_bytes == comm.total_bytes
        assert row.collectives == comm.counts == {"all_reduce": 1}
        assert row.param_bytes == hand_params(row.num_workers)
        assert row.comm_bytes_per_worker == hand_sent_per_worker(row.num_workers)
        assert row.specialize_seconds > 0 and row.build_seconds is None
    assert result.formulas()["comm_bytes_per_worker"] == "(num_workers * 262144 - 262144) / num_workers"
    assert result.formulas()["param_bytes"] == "T.ceildiv(384, num_workers) * 2048 + 131072"


SHRUNK_MESH = 'R.device_mesh(("num_workers - 1",), I.Range(0, "num_workers - 1"))'  # no devices at 1


def shrunk_mlp_text() -> str:
    text = examples.text("mlp")
    mesh = 'R.device_mesh(("num_workers",), I.Range(0, "num_workers"))'
    assert mesh in text
    return text.replace(mesh, SHRUNK_MESH)


def test_a_count_that_does_not_specialize_gets_an_error_row_and_the_others_go_on():
    result = sweep(distir.parse(shrunk_mlp_text()), [1, 2, 3])
    ok = {r.num_workers: r for r in result.rows if r.error is None}
    assert sorted(ok) == [2, 3]
    (bad,) = [r for r in result.rows if r.error is not None]
    assert bad.num_workers == 1 and "mesh axis 0 has size 0" in bad.error and bad.param_bytes is None


def test_counts_that_do_not_divide_get_uneven_blocks_and_an_imbalance_above_one():
    result = sweep(examples.load("mlp"), [2, 3, 4, 7, 600])
    rows = {r.num_workers: r for r in result.rows}
    assert all(r.error is None for r in result.rows)
    # w1 (256, 512) S[1] and w2 (512, 256) S[0]: blocks of ceil(512 / n); x (128, 256) whole
    for n, r in rows.items():
        assert r.param_bytes == 128 * 256 * 4 + 2 * 256 * -(-512 // n) * 4
    assert rows[2].param_imbalance == rows[4].param_imbalance == 1
    # at 7: blocks of 74 x6 and 68; device 0 holds 74 of 512 / 7 columns of w1 and rows of w2
    assert rows[7].param_imbalance == Fraction(128 * 256 + 2 * 256 * 74, 128 * 256 + Fraction(2 * 256 * 512, 7))
    # at 600: 88 devices hold no column at all
    assert rows[600].param_imbalance == Fraction(128 * 256 + 2 * 256, 128 * 256 + Fraction(2 * 256 * 512, 600))


def test_other_symbolic_sizes_must_be_bound():
    with pytest.raises(DistirError, match=r"depend on s; give its value with --bind \(e.g. --bind s=128\)"):
        sweep(examples.load("llama"), [1, 2])
    result = sweep(examples.load("llama"), [1, 2], bind={"s": 16})
    assert result.bound == {"s": 16}
    assert result.rows[1].comm_total_bytes == 2 * 2 * 1 * 16 * 128 * 4  # two all-reduces of (16, 128) at 2 workers
    with pytest.raises(DistirError, match="'num_workers' is the swept size"):
        sweep(examples.load("mlp"), [1], bind={"num_workers": 2})


def test_parse_counts():
    assert parse_counts("1,2,4,8,16") == [1, 2, 4, 8, 16]
    assert parse_counts("1-128x2") == [1, 2, 4, 8, 16, 32, 64, 128]
    assert parse_counts("1-3") == [1, 2, 3] and parse_counts("3-12") == list(range(3, 13))
    assert parse_counts("3-12x2") == [3, 6, 12] and parse_counts("1-100x10") == [1, 10, 100]
    assert parse_counts("3, 1-4, 3") == [1, 2, 3, 4]
    with pytest.raises(DistirError, match="is 5000 counts, more than the 1024 a sweep runs; use a range growing by a "
                                          "factor, like 1-5000x2"):
        parse_counts("1-5000")
    for bad in ("0", "x", "4-2", "", "1-8x1", "1-8x", "1-x2"):
        with pytest.raises(DistirError, match="device counts"):
            parse_counts(bad)


def test_human_units():
    assert human_bytes(0) == "0 B" and human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(655360) == "640 KiB"
    assert human_bytes(Fraction(393216, 3)) == "128 KiB" and human_bytes(3 * 2**30) == "3 GiB"
    assert human_bytes(None) == "-"
    assert human_seconds(0) == "0 s" and human_seconds(2.5e-5) == "25 µs" and human_seconds(0.0123) == "12.3 ms"
    assert human_rate(25e9) == "25 GB/s"


def run_cli(argv, capsys):
    code = distir_main.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_table_shows_the_formulas_once_then_a_row_per_count(mlp_file, capsys):
    code, out, err = run_cli(["sweep", str(mlp_file), "--num-workers", "1,2,4"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"distir sweep {mlp_file}:" and lines[1].startswith("  pipeline ")  # a long path: two lines
    assert "  parameters        T.ceildiv(384, num_workers) * 2048 + 131072" in lines
    assert "  bytes sent        (num_workers * 262144 - 262144) / num_workers" in lines
    assert "    all_reduce x1   (num_workers * 262144 - 262144) / num_workers" in lines
    assert any(line.startswith("  peak activations  the largest of 3:") for line in lines)
    assert " ".join(out.split()).count("num_workers * 262144 - 262144") == 3  # the formulas are printed once (bytes, by kind, time)
    header = next(line for line in lines if "params" in line and "imbal." in line)
    assert header.split() == ["W", "params", "imbal.", "peak", "act.", "sent", "comm", "spec.", "collectives"]
    rows = {line.split()[0]: line for line in lines if line.strip() and line.split()[0] in ("1", "2", "4")}
    assert human_bytes(hand_params(2)) in rows["2"] and human_bytes(hand_sent_per_worker(2)) in rows["2"]
    assert "all_reduce x1" in rows["4"] and "0 B" in rows["1"]
    assert "  W: workers; params: parameter bytes per worker" in out  # the legend of the short headers


def test_cli_json_has_formulas_and_rows(mlp_file, capsys):
    code, out, _ = run_cli(["sweep", str(mlp_file), "--num-workers", "1-8x2", "--json", "--latency", "1e-5",
                            "--bandwidth", "1e9"], capsys)
    assert code == 0
    data = json.loads(out)
    assert [r["num_workers"] for r in data["rows"]] == [1, 2, 4, 8]
    assert data["formulas"]["param_bytes"] == "T.ceildiv(384, num_workers) * 2048 + 131072"
    assert data["model"] == {"latency_seconds": 1e-5, "bandwidth_bytes_per_second": 1e9, "axis_costs": None}
    for r in data["rows"]:
        w = r["num_workers"]
        assert r["param_bytes"] == hand_params(w)
        assert r["comm_bytes_per_worker"] == pytest.approx(float(hand_sent_per_worker(w)))
        assert r["comm_seconds"] == pytest.approx(2 * (w - 1) * 1e-5 + float(hand_sent_per_worker(w)) / 1e9)
        assert r["collectives"] == {"all_reduce": 1} and r["error"] is None
    assert {c["at"] for c in data["peak_candidates"]} == {"a", "y", "y_r"}


def test_cli_plot_writes_a_png(mlp_file, tmp_path, capsys):
    png = tmp_path / "sweep.png"
    code, out, _ = run_cli(["sweep", str(mlp_file), "--num-workers", "1,2,4,8", "--plot", str(png)], capsys)
    assert code == 0 and f"wrote {png}" in out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_cli_errors(mlp_file, tmp_path, capsys):
    shrunk = tmp_path / "shrunk.py"
    shrunk.write_text(shrunk_mlp_text())
    code, out, err = run_cli(["sweep", str(shrunk), "--num-workers", "1,3"], capsys)
    assert code == 1 and "see error below" in out
    assert "distir sweep: error: num_workers=1: mesh axis 0 has size 0" in err
    code, _, err = run_cli(["sweep", str(examples.path("llama"))], capsys)
    assert code == 1 and "--bind s=128" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as info:  # a usage error, found while parsing the arguments
        distir_main.main(["sweep", str(mlp_file), "--num-workers", "two"])
    assert info.value.code == 2 and "'two' is not a positive integer" in capsys.readouterr().err
    code, _, err = run_cli(["sweep", str(tmp_path / "missing.py")], capsys)
    assert code == 1 and "no such file" in err


def test_build_without_distir_tvm_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distir.tvm", None)
    with pytest.raises(DistirError, match="--build needs distir.tvm"):
        tvm_builder()


def test_build_compiles_each_count_with_tvm(mlp_file, capsys):
    code, out, err = run_cli(["sweep", str(mlp_file), "--num-workers", "1,2", "--build"], capsys)
    assert code == 0, err
    header = next(line for line in out.splitlines() if "imbal." in line)
    assert header.split()[-2:] == ["build", "collectives"] and "build: TVM build time" in out
    result = sweep(distir.parse(mlp_file.read_text()), [2], build=tvm_builder())
    assert result.rows[0].build_seconds > 0


def test_sweep_of_the_bundled_llama_layer_prints_the_table_and_writes_a_png(tmp_path, capsys):
    png = tmp_path / "llama.png"
    code, out, err = run_cli(["sweep", str(examples.path("llama")), "--num-workers", "1-8x2", "--bind", "s=64",
                              "--plot", str(png)], capsys)
    assert code == 0, err
    assert "; s = 64" in " ".join(out.split()[:12]) and "all_reduce x2" in out
    rows = [line.split() for line in out.split("─")[-1].splitlines() if line.strip()[:1].isdigit()]  # below the rule
    assert [r[0] for r in rows] == ["1", "2", "4", "8"]
    # two all-reduces of the (64, 128) activation: 2 * 2 (w - 1) / w * 32 KiB sent per worker
    assert human_bytes(Fraction(2 * 2 * 7 * 64 * 128 * 4, 8)) in " ".join(rows[-1])
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_regroup_counts_bytes_and_latency_only_at_counts_where_it_moves_data():
    from distir.analysis import CommModel

    model = CommModel(latency=1e-6, bandwidth=1e9)
    result = sweep(examples.load("llama"), [3, 4], bind={"s": 16}, model=model)
    rows = {r.num_workers: r for r in result.rows}
    # at 4 the 8 heads divide: the regroups are identities, only the two ring all-reduces remain
    assert rows[4].collectives == {"all_reduce": 2}
    assert rows[4].comm_seconds == pytest.approx(model.seconds(2 * 2 * 3, rows[4].comm_bytes_per_worker))
    # at 3 they re-block Q, K, V and the attention output and cost their rounds too
    assert rows[3].collectives == {"all_reduce": 2, "regroup": 4}
    assert rows[3].comm_seconds > model.seconds(2 * 2 * 2, rows[3].comm_bytes_by_kind["all_reduce"] / 3)


def test_llama_sweep_fits_80_columns_and_prints_0_1_factors_as_conditions(capsys):
    """At 3 and 16 workers the Llama layer regroups its heads: the regroup bytes are printed by name
    (what each worker lacks, no closed formula), and every line fits 80 columns."""
    code, out, err = run_cli(["sweep", str(examples.path("llama")), "--num-workers", "1,2,3,16", "--bind", "s=64"],
                             capsys)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80, [line for line in out.splitlines() if len(line) > 80]
    assert "T.min" not in out and "T.max" not in out
    # the regroup's bytes are the runs each worker lacks, a sum over the workers named as such (no 0/1
    # factor of an all-gather any more: that printing is covered below)
    assert "regroup_received(128,num_workers,1,16)*768" in "".join(out.split())
    rows = {line.split()[0]: line for line in out.split("─")[-1].splitlines() if line.strip()[:1].isdigit()}
    assert "regroup" not in rows["2"] and "regroup" in rows["3"] + rows["16"] + out  # may wrap to the next line


def test_a_0_1_factor_prints_as_the_condition_it_is_and_means_the_same():
    from distir.ir import sym
    from tvm import tirx

    n = sym.var("num_workers")
    a, b = sym.normalize(7 // n * 131072 + 122880), sym.normalize(127 // n * 8192)
    factor = sym.normalize(tirx.min(1, tirx.max(a - b, b - a)) * n)
    positive = sym.normalize(tirx.min(1, tirx.max(n - 2, 0)))
    assert "T.min(1, T.max(" in sym.to_str(factor)  # the parseable form, outside the context
    with sym.readable_conditions():
        assert sym.to_str(factor) == "(7 // num_workers * 131072 + 122880 != 127 // num_workers * 8192) * num_workers"
        assert sym.to_str(positive) == "(num_workers - 2 > 0)"
    for w in range(1, 40):
        va, vb = sym.evaluate(a, {"num_workers": w}), sym.evaluate(b, {"num_workers": w})
        assert sym.evaluate(factor, {"num_workers": w}) == (va != vb) * w
        assert sym.evaluate(positive, {"num_workers": w}) == (w - 2 > 0)


def test_a_sweep_reads_each_counts_own_layout_where_count_variants_differ():
    """The GQA block (2 KV heads) is laid out per class of the default counts: at 1-2 workers the KV
    heads are cut (a variant), elsewhere k and v are gathered. Each row is the program that runs at its
    count, not the formula of the function's own layout (which at 2 workers says 22,528 B): the oracle
    is the simulator running the distributed module at that count, compared with one device."""
    import warnings

    from distir import examples
    from distir.analysis.sweep import sweep
    from distir.driver import Driver, random_inputs

    mod = examples.load("gqa")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sweep(mod, [1, 2, 3, 4], func="forward", bind={"s": 16})
        inputs = random_inputs(mod, "forward", {"s": 16})
        d = Driver(mod, func="forward")
        assert any("count_guard" in f.attrs for f in d.local.functions.values())
        for row in res.rows:
            ran = d.run(inputs, row.num_workers)
            assert ran.ok and row.comm_bytes_per_worker == ran.stats.bytes_per_worker, row.num_workers
    assert res.rows[1].comm_bytes_per_worker == 20480
