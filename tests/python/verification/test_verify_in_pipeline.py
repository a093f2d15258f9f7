"""The distribute pipeline's own check (``distribute.verify``, ``Driver(verify=...)``,
``distir-opt --verify-distribute``): a right lowering is checked and its verdict recorded, a wrong
one is an error naming the count, a check that does less than asked is an error or a warning as
told, and a misspelt key or value is refused in one line before any work."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir import examples
from distir.cli.opt import main as opt_main
from distir.driver import Driver, random_inputs
from distir.errors import DistirError
from distir.ir.structural import structural_equal
from distir.runtime.interpreter import run as run_global
from distir.runtime.spmd import run_spmd
from distir.transform import PassContext, PassInstrument
from distir.transform.pipelines import VERDICTS_ATTR, distribute_pipeline
from distir.transform.specialize import specialize
from distir.verification.in_pipeline import IncompleteVerificationWarning
from test_verify_counts import gather_program, reduce_program, refuse_three, sum_where_max_belongs


def _distribute(mod, **config):
    with PassContext(config=config):
        return distribute_pipeline()(mod)


def test_every_count_on_a_bundled_example_is_recorded_and_holds_at_a_count_not_run():
    mod = examples.load("mlp")
    local = _distribute(mod, **{"distribute.verify": "every-count"})
    verdict = local.attrs[VERDICTS_ATTR]["main"]
    assert verdict.startswith("CHECKED AT EVERY COUNT num_workers >= 1"), verdict
    # the check changes nothing in the lowering but the record
    plain = _distribute(mod)
    assert VERDICTS_ATTR not in plain.attrs
    assert structural_equal(local.replace(attrs={}), plain)
    # the claim, tested apart from the check: a count it did not run computes the global program
    assert " 27," not in verdict.split(" run,")[0] and "27 run" not in verdict
    xs = random_inputs(mod, "main", {}, seed=5)
    want = run_global(mod, *xs)
    got = run_spmd(specialize(local, {"num_workers": 27}), *xs)
    want = np.asarray(want)  # within float32's tolerance as the check states it: atol x the largest value
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_driver_option_checks_sampled_counts_at_its_bound_sizes():
    d = Driver(examples.load("llama"), bind={"s": 5}, verify="sampled")
    verdict = d.local.attrs[VERDICTS_ATTR]["main"]
    assert verdict.startswith("CHECKED for counts 1..8 with s=5 "), verdict


def test_a_wrong_lowering_is_a_one_line_error_naming_the_count(monkeypatch):
    sum_where_max_belongs(monkeypatch)
    text = reduce_program("max", "float32", 5, 9)
    for mode in ("sampled", "every-count"):
        with pytest.raises(DistirError, match=r"^distribute\.verify: @main: the lowered module is wrong: "
                           r"COUNTEREXAMPLE at num_workers=2: output 0 element \[\d\] is ") as err:
            _distribute(distir.parse(text), **{"distribute.verify": mode})
        assert "\n" not in str(err.value)
    # the element named holds the sum of the row where the maximum belongs (an oracle apart from the check)
    x = random_inputs(distir.parse(text), seed=0)[0]
    with pytest.raises(DistirError, match=r"num_workers=2") as err:
        Driver(distir.parse(text), verify="sampled").distribute()
    row = int(str(err.value).split("element [")[1].split("]")[0])
    assert f"the global program gives {float(x[row].max())!r}" in str(err.value)


def test_cli_wrong_lowering_is_one_line_and_status_1(monkeypatch, tmp_path, capsys):
    sum_where_max_belongs(monkeypatch)
    src = tmp_path / "m.py"
    src.write_text(reduce_program("max", "float32", 5, 9))
    assert opt_main([str(src), "-p", "distribute", "--verify-distribute", "sampled"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "COUNTEREXAMPLE at num_workers=2" in err, err


def test_cli_right_lowering_says_the_verdict_and_prints_it_in_the_module(tmp_path, capsys):
    out = tmp_path / "out.py"
    assert opt_main(["python/distir/examples/mlp.py", "-p", "distribute", "--verify-distribute", "sampled",
                     "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "distribute.verify: @main: CHECKED for counts 1..8" in err, err
    back = distir.parse(out.read_text())
    assert back.attrs[VERDICTS_ATTR]["main"].startswith("CHECKED for counts 1..8")


class _Seen(PassInstrument):
    def __init__(self):
        self.names = []

    def run_before_pass(self, mod, p):
        self.names.append(p.name)


@pytest.mark.parametrize("config, message", [
    ({"distribute.verify": "every_count"},
     (r"^distribute\.verify must be one of 'off', 'sampled', 'every-count', got 'every_count' "
      r"\(did you mean 'every-count'\?\)$")),
    ({"distribute.verify": True}, r"^distribute\.verify must be one of .*, got True$"),
    ({"distribute.verfy": "sampled"},
     r"^unknown pass config key 'distribute\.verfy'; did you mean 'distribute\.verify'\? "),
    ({"distribute.verify": "sampled", "distribute.verify_incomplete": "ignore"},
     r"^distribute\.verify_incomplete must be one of 'error', 'warn', got 'ignore'$"),
    ({"distribute.verify": "sampled", "distribute.verify_dims": {"s": 0}},
     r"^distribute\.verify_dims must map symbolic size names to integers of at least 1"),
])
def test_a_misspelt_key_or_value_is_refused_in_one_line_before_any_pass(config, message):
    seen = _Seen()
    with pytest.raises(DistirError, match=message) as err, PassContext(instruments=[seen], config=config):
        distribute_pipeline()(examples.load("mlp"))
    assert "\n" not in str(err.value) and seen.names == []


def test_cli_refuses_an_unknown_mode(capsys):
    with pytest.raises(SystemExit, match="2"):
        opt_main(["python/distir/examples/mlp.py", "-p", "distribute", "--verify-distribute", "every"])
    assert "invalid choice: 'every'" in capsys.readouterr().err


def test_a_dim_the_module_lacks_is_refused():
    with pytest.raises(DistirError, match=r"^distribute\.verify_dims: no symbolic size t in the module \(its sizes: "
                       r"num_workers, s\)$"):
        _distribute(examples.load("llama"), **{"distribute.verify": "sampled", "distribute.verify_dims": {"t": 3}})


def test_not_checked_is_an_error_by_default_and_a_warning_when_told(monkeypatch):
    refuse_three(monkeypatch)
    mod = distir.parse(gather_program(9, 3))
    with pytest.raises(DistirError, match=r"^distribute\.verify=sampled: @main: NOT CHECKED: count 3: .*refused here"
                       r".*\(set distribute\.verify_incomplete='warn' to go on\)$"):
        _distribute(mod, **{"distribute.verify": "sampled"})
    with pytest.warns(IncompleteVerificationWarning, match=r"NOT CHECKED: count 3: .*refused here"):
        local = _distribute(mod, **{"distribute.verify": "sampled", "distribute.verify_incomplete": "warn"})
    assert local.attrs[VERDICTS_ATTR]["main"].startswith("NOT CHECKED: count 3")


def test_every_count_asked_but_only_sampled_is_said(monkeypatch):
    """An uneven S[0] -> R is planned per count (a replan): every count cannot be argued."""
    mod = distir.parse(gather_program(12, 3))
    with pytest.raises(DistirError, match=r"^distribute\.verify=every-count: @main: checked for counts 1, 2, 3, 4, 5, "
                       r"6, 7, 8 only, not at every count: R\.ccl\.replan at `x_r`"):
        _distribute(mod, **{"distribute.verify": "every-count"})
    with pytest.warns(IncompleteVerificationWarning, match="not at every count"):
        local = _distribute(mod, **{"distribute.verify": "every-count", "distribute.verify_incomplete": "warn"})
    assert local.attrs[VERDICTS_ATTR]["main"].startswith("CHECKED for counts 1..8")
    # sampled asked, sampled got: no complaint
    assert _distribute(mod, **{"distribute.verify": "sampled"}).attrs[VERDICTS_ATTR]["main"].startswith("CHECKED")


def test_driver_refuses_a_bad_mode_and_a_pipeline_that_cannot_check():
    mod = examples.load("mlp")
    lowered = Driver(mod).local  # a pipeline of one's own that hands back a lowering made before
    with pytest.raises(DistirError, match=r"^distribute\.verify must be one of .*got 'yes'$"):
        Driver(mod, verify="yes", pipeline=lambda m: lowered).distribute()
    with pytest.raises(DistirError, match=r"^Driver\(verify='sampled'\): the pipeline given ran no distribute "
                       r"pipeline, so nothing was checked"):
        Driver(mod, verify="sampled", pipeline=lambda m: lowered).distribute()
    assert VERDICTS_ATTR not in Driver(mod, verify="off").local.attrs


def test_the_check_disabled_while_asked_for_is_refused():
    ctx = PassContext(disabled_passes=["verify-distribute"], config={"distribute.verify": "sampled"})
    with pytest.raises(DistirError, match=r"^distribute\.verify='sampled' asks for the check that disabled passes "
                       r"turn off \('verify-distribute'\)"), ctx:
        distribute_pipeline()(examples.load("mlp"))
