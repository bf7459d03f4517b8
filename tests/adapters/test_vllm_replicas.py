"""adapters/vllm_replicas.gpu_groups: a tensor-parallel vLLM captioner gets tensor_parallel_size GPUs per caption
actor, and the stage runs one actor per such GPU group (at most the cluster's GPUs // tp)."""

from __future__ import annotations

from capeval.adapters.vllm_replicas import gpu_groups


def test_tensor_parallel_captioner_gets_its_gpus_and_one_replica_per_group():
    # 8 GPUs, "one actor per GPU" as sweeps write it, tp=4: two replicas of 4 GPUs each
    assert gpu_groups({"tensor_parallel_size": 4}, 8, 1, cluster_gpus=8) == (2, 4.0)
    assert gpu_groups({"tensor_parallel_size": 2}, 8, 1, cluster_gpus=8) == (4, 2.0)
    assert gpu_groups({"tensor_parallel_size": 2}, 1, 1, cluster_gpus=8) == (1, 2.0)  # fewer asked: as asked
    assert gpu_groups({}, 8, 1, cluster_gpus=8) == (8, 1.0)  # no tp: one per GPU, as before
    assert gpu_groups({"tensor_parallel_size": 8}, 2, 1, cluster_gpus=4) == (1, 8.0)  # too big: one, Ray says why


def test_cpu_stage_is_unchanged():
    assert gpu_groups({"tensor_parallel_size": 4}, 3, 0.0, cluster_gpus=None) == (3, 0.0)
    assert gpu_groups({"tensor_parallel_size": "x"}, 2, 1, cluster_gpus=None) == (2, 1.0)  # constructor reports it
