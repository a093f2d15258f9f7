"""Memory per worker and which count fits: liveness and TVM's planner counted by hand on small
programs, the KV cache of a decode function, and ``distir sweep --device-memory``."""

from __future__ import annotations

import json

import pytest

import distir
from distir import examples
from distir.analysis import memory_footprint
from distir.analysis.errors import AnalysisError
from distir.analysis.fit import memory_fit, memory_need, parse_bytes, worker_memory
from distir.analysis.planning import planned_memory
from distir.analysis.sweep import sweep
from distir.cli import main as distir_main
from distir.transform.pipelines import distribute_pipeline

HEAD = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 8), dtype="float32"), w: R.Tensor((8, 16), dtype="float32"),
             v: R.Tensor((16, 32), dtype="float32"), u: R.Tensor((32, 8), dtype="float32")):
        with R.dataflow():
"""


def module(body: str, out: str):
    text = HEAD + "".join(f"            {line}\n" for line in body.strip().splitlines())
    return distir.parse(text + f"            R.output({out})\n        return {out}\n")


# a (4, 8) float32 is 128 bytes, (4, 16) 256, (4, 32) 512
CHAIN = """
a = R.nn.relu(x)
b = R.matmul(a, w)
c = R.nn.relu(b)
d = R.matmul(c, v)
e = R.matmul(d, u)
f = R.nn.relu(e)
"""


def test_a_chain_frees_each_buffer_after_its_last_use():
    fp = memory_footprint(module(CHAIN, "f")).evaluate()
    # live while each binding runs: a 128; a+b 384; b+c 512; c+d 768; d+e 640; e+f 256 (f the result)
    assert fp.peak_bytes == 256 + 512 and fp.peak_at == "d"
    assert fp.param_bytes == 128 + 512 + 2048 + 1024


def test_the_planner_reuses_and_grows_released_tokens_of_a_chain():
    pm = planned_memory(module(CHAIN, "f"))
    # a: new T1 (128). b: a still read, new T2 (256); a released. c (256): T1 is below 256 and
    # within a 16th: grown to 256; b released. d (512): T2 (256) grown to 512; c released.
    # e (128): T1 (256) is the smallest released token of at least 128: taken as is; d released.
    # f: the result, allocated unplanned (128).
    assert pm.storage_bytes == (256, 512)
    assert pm.output_bytes == 128
    assert pm.total_bytes == 896 >= memory_footprint(module(CHAIN, "f")).evaluate().peak_bytes


def test_a_token_more_than_16_times_larger_is_not_reused():
    big = module("""
g = R.matmul(x, w)
h = R.matmul(g, v)
k = R.sum(h, axis=[0, 1])
k2 = R.add(k, k)
""", "k2")
    pm = planned_memory(big)
    # g 256 -> T1; h 512 -> T2, g released; k (4 bytes): T1 (256) is more than 16 x 4: a new token;
    # h released; k2: the result (4 bytes, unplanned)
    assert pm.storage_bytes == (256, 512, 4)
    assert pm.output_bytes == 4


def test_tokens_are_reused_within_a_dtype_only():
    mixed = module("""
a = R.nn.relu(x)
m = R.astype(a, "int32")
n = R.astype(m, "float32")
p = R.nn.relu(n)
""", "p")
    pm = planned_memory(mixed)
    # a: float T1 (128); m: int32, a new token T2 (128), a released; n: float, T1 again; p the result
    assert pm.storage_bytes == (128, 128)
    assert pm.output_bytes == 128


def test_an_output_written_in_place_is_not_a_second_buffer():
    viewed = module("""
a = R.nn.relu(x)
r = R.reshape(a, R.shape([8, 4]))
s = R.expand_dims(r, axis=[0])
t = R.nn.relu(s)
""", "t")
    fp = memory_footprint(viewed).evaluate()
    # r and s are a read with other shapes: while t runs, a (through s) and t are live
    assert fp.peak_bytes == 2 * 128
    pm = planned_memory(viewed)
    assert pm.storage_bytes == (128,) and pm.output_bytes == 128


SQUARE = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((8, 8), dtype="float32")):
        with R.dataflow():
            a = R.nn.relu(x)
%s
            R.output(y)
        return y
"""


def test_a_copy_that_keeps_the_elements_is_a_view_and_a_transpose_is_not():
    views = distir.parse(SQUARE % """
            r = R.repeat(a, 1, axis=0)
            c = R.astype(r, "float32")
            y = R.add(r, c)""")
    # r and c are a (TVM rewrites both into views): while y runs, a and y are live (256 bytes each);
    # as copies, r, c and y would be
    assert memory_footprint(views).evaluate().peak_bytes == 2 * 256
    assert planned_memory(views).storage_bytes == (256,)
    transposed = distir.parse(SQUARE % """
            t = R.permute_dims(a, axes=[1, 0])
            y = R.add(t, a)""")
    # the transpose of a square matrix has a's type but is a copy: a, t and y are live while y runs
    assert memory_footprint(transposed).evaluate().peak_bytes == 3 * 256
    assert planned_memory(transposed).storage_bytes == (256, 256)


DECODE = """
@I.ir_module
class Module:
    @R.function
    def main(q: R.Tensor((1, 16), dtype="float32"), past_key: R.Tensor(("n", 16), dtype="float32"),
             wk: R.Tensor((16, 16), dtype="float32")):
        R.func_attr({"num_input": 2})
        with R.dataflow():
            k = R.matmul(q, wk)
            keys = R.concat((past_key, k), axis=0)
            scores = R.matmul(q, R.permute_dims(keys))
            R.output(scores, keys)
        return (scores, keys)
"""


def test_a_decode_cache_is_counted_apart_and_grows_with_its_length():
    mod = distir.parse(DECODE)
    need = memory_need(mod)
    assert need.cache_params == ("past_key",)
    got = need.evaluate({"n": 100})
    assert (got.weight_bytes, got.cache_bytes, got.input_bytes) == (16 * 16 * 4, 100 * 16 * 4, 16 * 4)
    # k 64 B; keys (101, 16) = 6464 B, a result; the transpose of keys 6464 B; scores (1, 101) = 404 B, a result
    assert got.live_peak_bytes == 6464 + 6464 + 404
    assert got.planned.storage_bytes == (64, 6464) and got.planned.output_bytes == 6464 + 404
    assert got.total_bytes == 1024 + 6400 + 64 + 64 + 6464 + 6464 + 404
    # the formula of the total: parameters (cache included) + the liveness peak, in the cache's length
    assert need.total.evaluate({"n": 100}) == 1024 + 6400 + 64 + 6464 + 6464 + 404
    assert need.total.evaluate({"n": 10}) == 1024 + 640 + 64 + 2 * 11 * 16 * 4 + 11 * 4


def test_the_cache_can_be_named_and_an_unknown_name_is_one_error():
    mod = distir.parse(DECODE)
    assert memory_need(mod, cache=[]).cache_params == ()
    assert memory_need(mod, cache=[]).evaluate({"n": 4}).input_bytes == 64 + 4 * 16 * 4
    with pytest.raises(AnalysisError, match=r"@main has no parameter 'kv' to count as a KV cache \(it has: q, past_key, wk\)"):
        memory_need(mod, cache=["kv"])


def test_the_bundled_decode_caches_are_its_kv_pieces():
    local = distribute_pipeline()(examples.load("decode"))
    for w in (1, 2, 4):
        got = worker_memory(local, {"num_workers": w, "n": 64}, "decode")
        # k_cache and v_cache: (2 layers, 12 heads cut by workers, 64 positions, 8) float32 each
        assert got.cache_bytes == 2 * (2 * -(-12 // w) * 64 * 8 * 4)


# ---------------------------------------------------------------- fit


def mlp_need(w: int) -> int:
    """The bundled MLP by hand: x (128, 256) whole, w1 and w2 blocks of 512 / w; h and a (128, 512 / w)
    get a token each, y (128, 256) the one of h (grown when smaller), y_r the result (unplanned)."""
    params = 128 * 256 * 4 + 2 * 256 * (512 // w) * 4
    h = 128 * (512 // w) * 4
    y = 128 * 256 * 4
    return params + max(h, y) + h + y


def test_memory_fit_marks_the_counts_and_names_the_smallest():
    local = distribute_pipeline()(examples.load("mlp"))
    assert [mlp_need(w) for w in (1, 2, 4)] == [1835008, 1048576, 720896]
    fit = memory_fit(local, [1, 2, 4], "1MiB")
    assert [m.total_bytes for _, m in fit.rows] == [mlp_need(w) for w in (1, 2, 4)]
    assert fit.fitting == [2, 4] and fit.smallest == 2 and not fit.fits(1)
    assert fit.summary() == ("device memory 1.05 MB (1 MiB) per worker: fits at 2, 4 of the counts given; "
                             "the smallest that fits is 2")
    none = memory_fit(local, [1, 2, 4], 700_000)
    assert none.smallest is None
    assert none.summary().endswith("no count given fits (the least need is 721 kB (704 KiB), at 4 workers)")


def test_sweep_rows_say_what_fits():
    result = sweep(examples.load("mlp"), [1, 2, 4, 8], device_memory="1MiB")
    assert [r.need_bytes for r in result.rows] == [mlp_need(w) for w in (1, 2, 4, 8)]
    assert [r.fits for r in result.rows] == [False, True, True, True]
    assert result.smallest_fit == 2 and result.to_json()["smallest_fit"] == 2
    assert sweep(examples.load("mlp"), [1, 2], device_memory=None).rows[0].fits is None


@pytest.mark.parametrize("text, n", [("80GB", 80 * 10**9), ("80GiB", 80 * 2**30), ("512 MiB", 512 * 2**20),
                                     ("1.5TB", 15 * 10**11), ("300000", 300000), ("2kb", 2000)])
def test_sizes_parse_in_decimal_and_binary_units(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text, why", [("80XB", r"unknown unit 'XB'"), ("GB", r"not a size"), ("-3GB", r"not a size"),
                                       ("0.1B", r"less than one byte"), ("80 GB extra", r"not a size")])
def test_a_malformed_size_is_one_error(text, why):
    with pytest.raises(AnalysisError, match=rf"^device memory '{text}': {why}"):
        parse_bytes(text)


def run_cli(argv, capsys):
    code = distir_main.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_device_memory_marks_fit_and_names_the_smallest(capsys):
    path = str(examples.path("mlp"))
    code, out, err = run_cli(["sweep", path, "-n", "1,2,4", "--device-memory", "1MiB"], capsys)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:3].strip() in ("1", "2", "4")}
    assert rows["1"][6:9] == ["1.75", "MiB", "no"] and rows["2"][6:9] == ["1", "MiB", "yes"]
    assert rows["4"][6:9] == ["704", "KiB", "yes"]
    assert " ".join(line.strip() for line in out.splitlines()[-2:]) == ("device memory 1.05 MB (1 MiB) per worker: fits at 2, 4 of the counts given; "
                                    "the smallest that fits is 2")
    assert max(len(line) for line in out.splitlines()) <= 80
    code, out, err = run_cli(["sweep", path, "-n", "1,2,4", "--device-memory", "1MiB", "--json"], capsys)
    data = json.loads(out)
    assert data["smallest_fit"] == 2 and data["device_memory_bytes"] == 2**20
    assert [r["fits"] for r in data["rows"]] == [False, True, True]


@pytest.mark.parametrize("size, why", [("80XB", "'80XB': unknown unit 'XB'"), ("lots", "'lots': not a size")])
def test_cli_bad_device_memory_is_one_line(size, why, capsys):
    with pytest.raises(SystemExit) as exit_info:
        distir_main.main(["sweep", str(examples.path("mlp")), "--device-memory", size])
    assert exit_info.value.code == 2  # argparse's usage error
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("distir sweep: error: argument --device-memory: " + why)
    assert "Traceback" not in "\n".join(err)


def test_sweep_of_a_decode_function_counts_its_cache(tmp_path, capsys):
    # k_cache and v_cache: (2 layers, 12 heads in blocks of ceil(12 / W), 16 positions, 8) float32 each
    result = sweep(examples.load("decode"), [2, 5], bind={"n": 16}, func="decode", device_memory="80GB")
    assert result.cache_params == ("k_cache", "v_cache")
    assert result.formulas()["cache_bytes"] == "T.ceildiv(12, num_workers) * 2048"
    assert [r.cache_bytes for r in result.rows] == [2 * 2 * 6 * 16 * 8 * 4, 2 * 2 * 3 * 16 * 8 * 4]
    assert all(r.fits for r in result.rows) and result.smallest_fit == 2
    path = tmp_path / "decode.py"
    path.write_text(examples.load("decode").script())
    code, out, err = run_cli(["sweep", str(path), "--func", "decode", "--bind", "n=16", "-n", "2", "--device-memory",
                              "80GB"], capsys)
    assert code == 0, err
    assert "    KV cache        T.ceildiv(12, num_workers) * 2048" in out.splitlines()
    code, out, err = run_cli(["sweep", str(path), "--func", "decode", "--bind", "n=16", "-n", "2", "--cache", "kv"],
                             capsys)
    assert code == 1 and err.strip() == ("distir sweep: error: @decode has no parameter 'kv' to count as a KV cache "
                                         "(it has: ids, cos, sin, k_cache, v_cache, embed_tokens_weight, ... (26 in all))")


def test_a_count_the_module_does_not_take_is_an_error_not_another_counts_numbers():
    static = distir.parse(examples.text("mlp").replace('("num_workers",), I.Range(0, "num_workers")', '(4,), I.Range(0, 4)'))
    local = distribute_pipeline()(static)
    assert worker_memory(local).total_bytes == mlp_need(4)
    with pytest.raises(AnalysisError, match=r"^@main has no symbolic size 'num_workers' \(its meshes and shapes"):
        memory_fit(local, [2], "1GB")


def test_auto_sweep_rows_say_what_fits():
    from distir.analysis.sweep import auto_sweep

    text = "\n".join(line for line in examples.text("mlp").splitlines() if "annotate_sharding" not in line)
    for laid, plain in (("w1_s", "w1"), ("w2_s", "w2"), ("a_s", "a"), ("y_r", "y")):
        text = text.replace(laid, plain)
    result = auto_sweep(distir.parse(text), [1, 2], device_memory=10**9)
    for r in result.rows:
        assert r.error is None and r.need_bytes == r.param_bytes + r.activation_bytes and r.fits
    assert result.smallest_fit == 1 and result.to_json()["smallest_fit"] == 1
    tight = auto_sweep(distir.parse(text), [1, 2], device_memory=result.rows[1].need_bytes)
    assert [r.fits for r in tight.rows] == [result.rows[0].need_bytes <= result.rows[1].need_bytes, True]
