"""The reference trainer: a small GPT trained byte-level under a low-precision recipe.

AdamW on fp32 master weights (optimizer state fp32 too), cosine learning rate with linear warm-up,
gradient clipping, delayed-scaling updates after every optimizer step. `Trainer.state_dict()` holds the
model (with its quantization buffers), the optimizer and the step; since batches are a pure function of
(seed, step), loading it mid-run continues the exact loss trajectory.
"""

from __future__ import annotations

import json
import math
import pickle
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tenfold.engine import ConversionPolicy, ConversionReport, Recipe, convert, recipe, update_scaling
from tenfold.engine.autoprecision.policy import PrecisionPolicy
from tenfold.engine.backend import GEMM_BACKENDS
from tenfold.engine.recipes import RECIPE_NAMES
from tenfold.engine.telemetry.recorder import Recorder
from tenfold.formats.fake import QUANT_PATHS
from tenfold.train.compare import format_recipe_spec
from tenfold.train.data import DEFAULT_MAX_BYTES, ByteDataset, load_corpus
from tenfold.train.model import GPT, MODEL_SIZES, GPTConfig

# Under quant_backend="auto", runs shorter than this many steps quantize operands eagerly. Measured by
# benchmarks/warmup.py (small model, 1 thread, cold inductor cache): compiling costs 40-330 s more before
# the first step and then saves 1.6-18 s a step, so it pays from 14 (nvfp4), 19 (mxfp8), 25 (fp8_current)
# steps; for the three together, from about 18 steps.
COMPILE_MIN_STEPS = 18


def quant_path_for(config: TrainConfig) -> str:
    """The operand quantization path a run uses: `config.quant_backend`, except that ``auto`` becomes
    ``eager`` for runs under `COMPILE_MIN_STEPS` steps (above it, ``auto`` compiles large operands)."""
    if config.quant_backend == "auto" and config.steps < COMPILE_MIN_STEPS:
        return "eager"
    return config.quant_backend


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One training run.

    Fields:
        recipe: low-precision recipe name (see `tenfold.engine.RECIPE_NAMES`).
        recipe_options: field overrides of the recipe, ((field, value), ...), as `recipe(name, **options)`
            takes them (e.g. (("hp_tail", 0.25),)); a dict is accepted and stored sorted. The recipe's
            `seed` is always `seed` below.
        model: model size name (see `MODEL_SIZES`); the fields below override its shape when set.
        n_layers, d_model, n_heads, d_ff, seq_len: shape overrides (None = the size's value).
        steps: optimizer steps.
        batch_size: sequences per step.
        lr: peak learning rate; min_lr_ratio: final lr as a fraction of it (cosine decay).
        warmup_steps: linear warm-up steps.
        weight_decay: AdamW decoupled weight decay on matrices.
        grad_clip: global gradient-norm clip (0 = off).
        eval_every: steps between validation passes (0 = only at the end).
        eval_batches: validation batches per pass (fixed, the same for every recipe).
        seed: model-initialisation, data and stochastic-rounding seed.
        data: text file to train on; None = the embedded standard-library corpus.
        max_corpus_bytes: cap on the embedded corpus.
        backend: GEMM backend of quantized layers: auto | emulated | native.
        quant_backend: how emulated operands are quantized: auto | eager | compiled | reference;
            ``auto`` is eager for runs under `COMPILE_MIN_STEPS` steps (see `quant_path_for`).
        hp_last_blocks: override the recipe's high-precision tail (None = recipe default).
        policy: path of a per-layer precision policy TOML (`tenfold policy` writes one); when set it
            replaces `recipe` and `hp_last_blocks`: each listed layer gets its format, the rest stay bf16.
        compile: wrap the model in torch.compile.
        timing_warmup_steps: first steps left out of the reported throughput (they compile kernels).
    """

    recipe: str = "bf16"
    recipe_options: tuple[tuple[str, Any], ...] = ()
    model: str = "small"
    n_layers: int | None = None
    d_model: int | None = None
    n_heads: int | None = None
    d_ff: int | None = None
    seq_len: int | None = None
    steps: int = 200
    batch_size: int = 16
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_batches: int = 8
    seed: int = 0
    data: str | None = None
    max_corpus_bytes: int = DEFAULT_MAX_BYTES
    backend: str = "auto"
    quant_backend: str = "auto"
    hp_last_blocks: int | None = None
    policy: str | None = None
    compile: bool = False
    timing_warmup_steps: int = 2

    def __post_init__(self) -> None:
        if self.recipe not in RECIPE_NAMES:
            raise ValueError(f"unknown recipe {self.recipe!r}; valid: {', '.join(RECIPE_NAMES)}")
        self._check_recipe_options()
        if self.model not in MODEL_SIZES:
            raise ValueError(f"unknown model size {self.model!r}; valid: {', '.join(MODEL_SIZES)}")
        for f in ("steps", "batch_size"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")
        for f in (
            "warmup_steps",
            "eval_every",
            "weight_decay",
            "grad_clip",
            "eval_batches",
            "timing_warmup_steps",
        ):
            if getattr(self, f) < 0:
                raise ValueError(f"{f} must be >= 0, got {getattr(self, f)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.backend not in GEMM_BACKENDS:
            raise ValueError(f"backend {self.backend!r} is not one of: {', '.join(GEMM_BACKENDS)}")
        if self.quant_backend not in QUANT_PATHS:
            raise ValueError(f"quant_backend {self.quant_backend!r} is not one of: {', '.join(QUANT_PATHS)}")
        self.gpt_config()  # validates the shape overrides
        if self.policy is not None:
            PrecisionPolicy.load(self.policy)  # a missing or malformed file fails here, not mid-run

    def _check_recipe_options(self) -> None:
        """Normalise `recipe_options` to a sorted tuple of pairs and build the recipe once, so a bad field
        or value fails here with the recipe's ValueError."""
        opts = self.recipe_options
        items = opts.items() if isinstance(opts, dict) else opts
        try:
            pairs = tuple(sorted((str(k), v) for k, v in items))
        except (TypeError, ValueError):
            raise ValueError(
                f"recipe_options must be (field, value) pairs or a dict, got {self.recipe_options!r}"
            ) from None
        object.__setattr__(self, "recipe_options", pairs)
        if not pairs:
            return
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError(f"recipe_options name a field twice: {keys}")
        if "seed" in keys:
            raise ValueError("recipe_options may not set 'seed': the recipe's seed is TrainConfig.seed")
        if self.policy is not None:
            raise ValueError(
                f"recipe_options {pairs} apply to a recipe, but policy={self.policy!r} replaces it"
            )
        try:
            self.build_recipe()
        except TypeError as err:  # a value of the wrong type deep in the recipe's own checks
            raise ValueError(f"recipe {self.recipe!r}: bad recipe_options {pairs}: {err}") from None

    def build_recipe(self) -> Recipe:
        """The recipe this run trains with: `recipe(self.recipe, **recipe_options, seed=self.seed)`."""
        return recipe(self.recipe, **dict(self.recipe_options), seed=self.seed)

    @property
    def label(self) -> str:
        """The run's name: the recipe (with its options), or the policy file's stem."""
        if self.policy:
            return Path(self.policy).stem
        return format_recipe_spec(self.recipe, self.recipe_options)

    def gpt_config(self) -> GPTConfig:
        over = {
            k: getattr(self, k)
            for k in ("n_layers", "d_model", "n_heads", "d_ff", "seq_len")
            if getattr(self, k) is not None
        }
        return replace(MODEL_SIZES[self.model], **over)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.gpt_config().seq_len

    @property
    def timed_from(self) -> int:
        """Steps before this one are warm-up, left out of the throughput (at least one step is timed)."""
        return min(self.timing_warmup_steps, self.steps - 1)

    def memory_bytes(self) -> int:
        """A lower bound on the host memory a step needs: fp32 weights, gradients and AdamW's two
        moments (16 bytes per parameter), plus the fp32 activations autograd keeps: per token and block
        about 8*d_model + 3*d_ff values and the seq_len attention scores per head, and the logits."""
        g = self.gpt_config()
        per_token = g.n_layers * (8 * g.d_model + 3 * g.d_ff + g.n_heads * g.seq_len) + 3 * g.vocab_size
        return 16 * g.n_params + 4 * self.tokens_per_step * per_token


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    """What a run produced.

    Fields:
        config: the run's configuration.
        steps: per-step rows (step, loss, lr, grad_norm, tokens_per_s).
        evals: validation rows (step, val_loss).
        final_val_loss: validation loss after the last step.
        tokens_per_s: mean training throughput over the timed steps (after `config.timed_from` warm-up
            steps, whose compilation would otherwise dominate a short run).
        wall_s: wall-clock seconds of the training loop.
        conversion: what convert() did to the model.
    """

    config: TrainConfig
    steps: tuple[dict[str, float], ...]
    evals: tuple[dict[str, float], ...]
    final_val_loss: float
    tokens_per_s: float
    wall_s: float
    conversion: ConversionReport = field(repr=False)

    def summary(self) -> dict[str, Any]:
        return {
            "recipe": self.config.recipe if self.config.policy is None else "policy",
            "policy": self.config.policy,
            "model": asdict(self.config.gpt_config()),
            "steps": self.config.steps,
            "final_train_loss": self.steps[-1]["loss"] if self.steps else math.nan,
            "final_val_loss": self.final_val_loss,
            "tokens_per_s": self.tokens_per_s,
            "throughput_warmup_steps_excluded": self.config.timed_from,
            "wall_s": self.wall_s,
            "converted_layers": len(self.conversion.converted),
            "kept_layers": len(self.conversion.kept),
        }


def adamw(params: Iterable[nn.Parameter], *, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW as the trainer runs it: decoupled weight decay on matrices only (norm gains and biases, the
    1-D parameters, take none, as in GPT-2/nanoGPT-style recipes), betas (0.9, 0.95), eps 1e-8."""
    params = list(params)
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )


class Trainer:
    """Builds the model, converts it to the recipe, and trains it step by step."""

    def __init__(
        self,
        config: TrainConfig,
        *,
        dataset: ByteDataset | None = None,
        recorder: Recorder | None = None,
        model: Callable[[], nn.Module] | None = None,
    ) -> None:
        """`recorder`: an optional telemetry `Recorder`, attached to the converted model; the trainer
        brackets every training step with its `begin_step` / `end_step` (evaluation is never sampled).

        `model`: builds the module to train in place of the reference GPT (e.g. `tenfold.train.hf.llama`
        with its shape bound); it is called after seeding with `config.seed`, so initial weights follow
        the seed, and must map token ids (B, seq_len) to logits (B, seq_len, 256). `config` still gives the
        sequence length, the schedule and the recipe; its other shape fields are not used, and
        `load_trained` cannot rebuild such a model from `save_weights` (it builds the GPT)."""
        self.config = config
        cfg = config.gpt_config()
        self.dataset = dataset or ByteDataset.from_bytes(load_corpus(config.data, config.max_corpus_bytes))
        self.dataset.check_fits(cfg.seq_len, config.data)
        torch.manual_seed(config.seed)
        self.model = GPT(cfg) if model is None else model()
        policy = ConversionPolicy(
            backend=config.backend, quant_backend=quant_path_for(config), hp_last_blocks=config.hp_last_blocks
        )
        target = PrecisionPolicy.load(config.policy) if config.policy else config.build_recipe()
        # a policy's recipes take the run's seed, as the named recipe does (`build_recipe`)
        self.conversion = convert(
            self.model, target, policy=policy, seed=config.seed if config.policy else None
        )
        self.recorder: Recorder | None = None
        if recorder is not None:
            self.attach_recorder(recorder)
        self.optimizer = adamw(self.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.forward = torch.compile(self.model) if config.compile else self.model
        self.step = 0

    def attach_recorder(self, recorder: Recorder) -> None:
        """Record telemetry from now on (`recorder.attach` on the converted model)."""
        self.recorder = recorder
        recorder.attach(self.model)

    def lr_at(self, step: int) -> float:
        c = self.config
        if c.warmup_steps and step < c.warmup_steps:
            return c.lr * (step + 1) / c.warmup_steps
        span = max(c.steps - c.warmup_steps, 1)
        t = min(max(step - c.warmup_steps, 0) / span, 1.0)
        return c.lr * (c.min_lr_ratio + (1 - c.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.forward(x)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

    def train_step(self) -> dict[str, float]:
        """One optimizer step; returns its metrics row."""
        c = self.config
        self.model.train()
        x, y = self.dataset.batch("train", self.step, c.batch_size, c.gpt_config().seq_len, c.seed)
        lr = self.lr_at(self.step)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        t0 = time.perf_counter()
        rec = self.recorder
        if rec is not None:
            rec.begin_step(self.step)
        loss = self._loss(x, y)
        loss.backward()
        if rec is not None:
            rec.end_step()
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip or math.inf)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        update_scaling(self.model)
        dt = time.perf_counter() - t0
        self.step += 1
        return {
            "step": self.step,
            "loss": loss.item(),
            "lr": lr,
            "grad_norm": float(gnorm),
            "tokens_per_s": c.tokens_per_step / dt,
        }

    @torch.no_grad()
    def evaluate(self, batches: int | None = None) -> float:
        """Mean validation loss over the first `batches` fixed validation batches (default: eval_batches)."""
        c = self.config
        self.model.eval()
        losses = []
        for i in range(max(batches or c.eval_batches, 1)):
            x, y = self.dataset.batch("val", i, c.batch_size, c.gpt_config().seq_len, c.seed)
            losses.append(self._loss(x, y).item())
        self.model.train()
        return sum(losses) / len(losses)

    def save_weights(self, path: str | Path) -> Path:
        """The trained parameters (named as in a plain GPT) and the configuration, for `load_trained`.

        Smaller than `state_dict()` (no optimizer, no quantization buffers): what analysis needs."""
        p = Path(path)
        weights = {n: t.detach().cpu() for n, t in self.model.named_parameters()}
        torch.save({"config": asdict(self.config), "weights": weights}, p)
        return p

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "config": asdict(self.config),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # checkpoints from before `recipe_options` existed lack it: they had none
        saved = {**state["config"]}
        saved["recipe_options"] = tuple(tuple(p) for p in saved.get("recipe_options", ()))
        if saved != asdict(self.config):
            diff = sorted(k for k, v in saved.items() if asdict(self.config).get(k) != v)
            raise ValueError(
                f"checkpoint was made with a different configuration (fields: {', '.join(diff)})"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])

    def run(self, on_step: Callable[[dict[str, float]], None] | None = None) -> TrainResult:
        """Train until `config.steps`, evaluating every `eval_every` steps and at the end."""
        c = self.config
        rows: list[dict[str, float]] = []
        evals: list[dict[str, float]] = []
        t0 = time.perf_counter()
        train_s = 0.0
        timed = 0
        while self.step < c.steps:
            ts = time.perf_counter()
            row = self.train_step()
            if self.step > c.timed_from:
                train_s += time.perf_counter() - ts
                timed += 1
            if (c.eval_every and self.step % c.eval_every == 0) or self.step == c.steps:
                row["val_loss"] = self.evaluate()
                evals.append({"step": self.step, "val_loss": row["val_loss"]})
            rows.append(row)
            if on_step is not None:
                on_step(row)
        final = evals[-1]["val_loss"] if evals else self.evaluate()
        n_tokens = c.tokens_per_step * timed
        return TrainResult(
            config=c,
            steps=tuple(rows),
            evals=tuple(evals),
            final_val_loss=final,
            tokens_per_s=n_tokens / train_s if train_s else 0.0,
            wall_s=time.perf_counter() - t0,
            conversion=self.conversion,
        )


WEIGHTS_NAME = "weights.pt"


def load_trained(path: str | Path) -> tuple[TrainConfig, GPT]:
    """The configuration and a plain, unconverted GPT with the weights `Trainer.save_weights` wrote.

    `path` is the file or a run folder holding `weights.pt` (`tenfold train` writes one)."""
    p = Path(path)
    if p.is_dir():
        p = p / WEIGHTS_NAME
    if not p.is_file():
        raise ValueError(f"{p} not found: train with `tenfold train` first (it saves {WEIGHTS_NAME})")
    try:
        blob = torch.load(p, map_location="cpu", weights_only=True)
        cfg = TrainConfig(**blob["config"])
        weights = blob["weights"]
    except (RuntimeError, KeyError, TypeError, EOFError, pickle.UnpicklingError) as err:
        why = (str(err).splitlines() or [type(err).__name__])[0][:120]
        raise ValueError(f"{p}: not a tenfold weights file ({why})") from None
    model = GPT(cfg.gpt_config())
    missing, unexpected = model.load_state_dict(weights, strict=False)
    params = {n for n, _ in model.named_parameters()}
    if unexpected or params & set(missing):
        raise ValueError(
            f"{p}: weights do not fit the model (missing {sorted(params & set(missing))[:3]}, "
            f"unexpected {sorted(unexpected)[:3]})"
        )
    return cfg, model


def write_metrics(rows: list[dict[str, Any]] | tuple[dict[str, Any], ...], path: str | Path) -> None:
    """One JSON object per line."""
    with Path(path).open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
