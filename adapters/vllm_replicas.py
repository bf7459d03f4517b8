"""How many vLLM captioner replicas a caption stage runs, and how many GPUs each gets.

A captioner with `tensor_parallel_size = tp` spreads one engine over tp GPUs, all of which must be visible inside
its one Ray actor (vLLM starts its tensor-parallel workers from there). So a caption actor reserves
max(gpus_per_actor, tp) GPUs, and the stage runs one actor per such GPU group: `caption_actors`, capped at the
cluster's GPUs // tp (a sweep written as "caption_actors = 8, one per GPU" on 8 GPUs runs 2 replicas at tp = 4
instead of waiting forever for GPUs that do not exist). On CPU (gpus_per_actor = 0) nothing changes.
"""

from __future__ import annotations


def gpu_groups(params: dict, num_actors: int, gpus_per_actor: float,
               cluster_gpus: float | None = None) -> tuple[int, float]:
    """(actors, GPUs per actor) for a caption stage whose captioner takes `params`."""
    if not gpus_per_actor:
        return max(1, num_actors), 0.0
    try:
        tp = int(params.get("tensor_parallel_size", 1) or 1)
    except (TypeError, ValueError):
        tp = 1  # the captioner's own constructor reports a bad value
    gpus = max(float(gpus_per_actor), float(tp))
    actors = max(1, num_actors)
    if cluster_gpus:
        actors = min(actors, max(1, int(cluster_gpus // gpus)))
    return actors, gpus
