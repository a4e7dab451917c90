"""What a trained SF-MoE routes where, on the held-out sample (train.py's ``env<i>_out``, the first
``SFMOE.SAMPLE_IMAGES``, without augmentation) of every environment, as ``predict`` runs:

* ``<stem>.png``: per image (``IMAGES_PER_DOMAIN`` of each environment), each MoE block's
  14x14 map of every patch's top-1 expert (colour), its gate value ``g1`` (opacity) and an
  ``x`` where it was over capacity, then the last block's class-token attention per head;
* ``<stem>_expert_load.png`` and ``.csv``: per MoE block and environment, each expert's share
  of top-1 assignments (all 198 tokens), the share dropped and the share sent to a second
  expert.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from torch import nn

from dmg_domainbed.algorithms.sfmoe.network import GRID, PREFIX_TOKENS
from dmg_domainbed.drawing import Drawn, FinishedRun, colours, figure, save

IMAGES_PER_DOMAIN = 2
BATCH = 32
# DomainBed's image normalisation (ImageNet statistics), undone for display.
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


@dataclass
class Seen:
    """What the network did with the images of one environment."""

    images: torch.Tensor  # [I, C, H, W] as the dataset gives them, the first IMAGES_PER_DOMAIN
    experts: list[torch.Tensor]  # per MoE block [I, 196] top-1 expert of each patch
    gates: list[torch.Tensor]  # per MoE block [I, 196] renormalised top-1 gate value
    dropped: list[torch.Tensor]  # per MoE block [I, 196] top-1 assignment over capacity
    attention: torch.Tensor  # [I, heads, 196] last block, from the class token
    load: list[dict[str, float]]  # per MoE block: shares over all the images


def class_token_attention(attention: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``[B, heads, N]`` softmax attention of the class token over all tokens, computed from the
    block's attention module and its input ``x [B, N, D]`` (timm's fused kernel returns none)."""
    batch, tokens, _ = x.shape
    qkv = attention.qkv(x).reshape(batch, tokens, 3, attention.num_heads, attention.head_dim)
    q, k, _ = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    q, k = attention.q_norm(q), attention.k_norm(k)
    return ((q[:, :, :1] * attention.scale) @ k.transpose(-2, -1)).softmax(-1)[:, :, 0]


@torch.no_grad()
def look(algorithm, images: torch.Tensor) -> Seen:
    """Run ``predict`` on ``images`` in batches and keep the routing and the attention."""
    network, layers = algorithm.network, algorithm.moe_layers
    captured: list[torch.Tensor] = []
    last = network.blocks[-1].attn
    # fp32 for numpy and matplotlib, also where a bf16 run computed it under autocast
    hook = last.register_forward_pre_hook(
        lambda module, args: captured.append(class_token_attention(module, args[0]).float())
    )
    routings: list[list] = [[] for _ in layers]
    device = next(network.parameters()).device
    try:
        for batch in images.split(BATCH):
            algorithm.predict(batch.to(device))
            for collected, layer in zip(routings, layers):
                collected.append(layer.routing)
    finally:
        hook.remove()
    shown = min(IMAGES_PER_DOMAIN, len(images))
    seen = Seen(images[:shown], [], [], [], torch.cat(captured)[:shown, :, PREFIX_TOKENS:], [])
    for collected in routings:
        experts = torch.cat([r.experts for r in collected]).cpu()
        gates = torch.cat([r.gates for r in collected]).cpu()
        kept = torch.cat([r.kept for r in collected]).cpu()
        num_experts = collected[0].probabilities.shape[-1]
        seen.experts.append(experts[:shown, PREFIX_TOKENS:, 0])
        seen.gates.append(gates[:shown, PREFIX_TOKENS:, 0])
        seen.dropped.append(~kept[:shown, PREFIX_TOKENS:, 0])
        share = torch.bincount(experts[..., 0].flatten(), minlength=num_experts)
        load = {f"expert {e}": v for e, v in enumerate((share / share.sum()).tolist())}
        load["dropped"] = 1 - kept[..., 0].float().mean().item()
        load["second"] = kept[..., 1:].sum().item() / kept[..., 0].numel()
        seen.load.append(load)
    return seen


def _display(image: torch.Tensor) -> np.ndarray:
    return np.clip(image.permute(1, 2, 0).numpy() * STD + MEAN, 0, 1)


def _expert_map(ax, experts, gates, dropped, palette) -> None:
    rgba = np.ones((GRID, GRID, 4))
    rgba[..., :3] = palette[experts.view(GRID, GRID).numpy()]
    rgba[..., 3] = gates.view(GRID, GRID).numpy()
    ax.imshow(rgba, interpolation="nearest")
    rows, cols = np.nonzero(dropped.view(GRID, GRID).numpy())
    ax.scatter(cols, rows, marker="x", s=14, c="black", linewidths=0.8)


def routing_figure(
    seen: dict[str, Seen], blocks: list[int], num_experts: int, heads: int, title: str
) -> Figure:
    """One row per image: image, top-1 expert map per MoE block, class-token attention per head."""
    rows = [(domain, i) for domain, s in seen.items() for i in range(len(s.images))]
    columns = 1 + len(blocks) + heads
    fig = figure(1.45 * columns, 1.0 + 1.5 * len(rows))
    axes = np.atleast_2d(fig.subplots(len(rows), columns, squeeze=False))
    palette = np.array([c[:3] for c in colours([str(e) for e in range(num_experts)]).values()])
    for row, (domain, i) in enumerate(rows):
        s = seen[domain]
        axes[row, 0].imshow(_display(s.images[i]))
        axes[row, 0].set_ylabel(domain, fontsize=8)
        for j, block in enumerate(blocks):
            _expert_map(axes[row, 1 + j], s.experts[j][i], s.gates[j][i], s.dropped[j][i], palette)
            if row == 0:
                axes[row, 1 + j].set_title(f"block {block}: top-1 expert", fontsize=8)
        for h in range(heads):
            ax = axes[row, 1 + len(blocks) + h]
            ax.imshow(s.attention[i, h].view(GRID, GRID).numpy(), cmap="viridis")
            if row == 0:
                ax.set_title(f"head {h}: class token", fontsize=8)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    handles = [Patch(color=palette[e], label=f"expert {e}") for e in range(num_experts)]
    if blocks:
        handles.append(
            Line2D([], [], marker="x", color="black", ls="", label="top-1 over capacity")
        )
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8)
    fig.suptitle(
        f"{title}\nexpert maps: opacity = gate value g1; attention of the last block",
        fontsize=9,
    )
    return fig


def load_figure(frame: pd.DataFrame, num_experts: int, title: str) -> Figure:
    """Per MoE block, grouped bars: top-1 share of each expert in every domain."""
    blocks = list(frame["block"].unique())
    fig = figure(1.2 + 1.1 * frame["domain"].nunique(), 1.0 + 2.2 * len(blocks))
    axes = np.atleast_1d(fig.subplots(len(blocks), 1, squeeze=False)[:, 0])
    palette = colours([f"expert {e}" for e in range(num_experts)])
    width = 0.8 / num_experts
    for ax, block in zip(axes, blocks):
        rows = frame[frame["block"] == block]
        positions = np.arange(len(rows))
        for e, (name, colour) in enumerate(palette.items()):
            ax.bar(positions + (e - (num_experts - 1) / 2) * width, rows[name], width, color=colour)
        ax.axhline(1 / num_experts, color="grey", ls="--", lw=0.8)
        ax.set_xticks(
            positions, [f"{d}\n({r})" for d, r in zip(rows["domain"], rows["role"])], fontsize=8
        )
        ax.set_ylabel("share of tokens (top-1)", fontsize=8)
        ax.set_title(f"block {block}: expert load; dashed: balanced", fontsize=9)
    handles = [Patch(color=palette[name], label=name) for name in palette]
    fig.legend(handles=handles, loc="outside lower center", ncol=num_experts, fontsize=8)
    fig.suptitle(title, fontsize=9)
    return fig


def draw(algorithm, run: FinishedRun, output_dir: Path, stem: str) -> Drawn:
    """Write the pictures and the table of the module docstring; the table is the summary."""
    algorithm.eval()
    seen, rows = {}, []
    for sample in run.samples:
        domain = f"{sample.environment} ({sample.role})"
        seen[domain] = look(algorithm, sample.images)
        where = {"domain": sample.environment, "role": sample.role}
        for block, load in zip(algorithm.blocks, seen[domain].load):
            rows.append({**where, "block": block, "images": len(sample.images), **load})
    title = f"SFMOE on {run.title}"
    output_dir.mkdir(parents=True, exist_ok=True)
    heads = algorithm.network.blocks[-1].attn.num_heads
    num_experts = algorithm.moe_layers[0].num_experts if algorithm.blocks else 0
    routing = routing_figure(seen, algorithm.blocks, num_experts, heads, title)
    files = [save(routing, output_dir / f"{stem}.png")]
    summary = pd.DataFrame(rows)
    if algorithm.blocks:
        files.append(
            save(load_figure(summary, num_experts, title), output_dir / f"{stem}_expert_load.png")
        )
        summary.to_csv(output_dir / f"{stem}_expert_load.csv", index=False)
        files.append(output_dir / f"{stem}_expert_load.csv")
        summary = summary.set_index(["domain", "role", "block"])
    return Drawn(summary=summary, files=files)
