"""Issue 26 item 2, `vllm-batch`: a round whose answer was rejected is run again by the next run, never answered
from the output file the first run already collected (that file holds the same rejected answer). The runner here
is a stand-in interpreter for `python -m vllm.entrypoints.openai.run_batch` (the vLLM runner itself is exercised by
test_vllm_batch.py): it writes the batch output format, answering with `choices: []` on its first run only, and
counts its runs."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from capeval.adapters.base import JudgeRequest
from capeval.adapters.vllm_batch import VLLMBatchJudge

RUNNER = """#!{python}
import json, sys
from pathlib import Path
args = sys.argv[1:]
inp, out = Path(args[args.index("-i") + 1]), Path(args[args.index("-o") + 1])
runs = Path({runs!r})
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
lines = []
for raw in inp.read_text().splitlines():
    req = json.loads(raw)
    choices = [] if n == 1 else [{{"index": 0, "message": {{"role": "assistant", "content": "B"}},
                                  "finish_reason": "stop"}}]
    body = {{"id": "x", "object": "chat.completion", "model": "m", "choices": choices,
             "usage": {{"prompt_tokens": 5, "completion_tokens": 1}}}}
    lines.append(json.dumps({{"id": "r", "custom_id": req["custom_id"], "error": None,
                              "response": {{"status_code": 200, "body": body}}}}))
out.write_text("".join(line + "\\n" for line in lines))
"""


def test_a_rejected_answer_is_run_again_not_read_from_the_collected_output(tmp_path):
    runs = tmp_path / "runs.txt"
    runner = tmp_path / "run_batch_python"
    runner.write_text(RUNNER.format(python=sys.executable, runs=str(runs)))
    runner.chmod(runner.stat().st_mode | stat.S_IXUSR)
    request = JudgeRequest(key="k1", user="Pick one.", choices=("A", "B"))

    def judge_once():
        with VLLMBatchJudge("m", python=str(runner), revision="r", state_dir=str(tmp_path / "state")) as judge:
            return judge.judge([request])[0]

    first = judge_once()
    assert first.text is None and "without choices" in first.error
    second = judge_once()
    assert second.error is None and second.text == "B", second
    assert runs.read_text() == "2"  # the same batch file was run again
    assert json.loads(next((tmp_path / "state" / "vllm").glob("*.out.jsonl")).read_text())["response"]["body"][
        "choices"], "the output on disk is the second run's"
