"""The report's judge validation section: for each judge of the last run, what its `validated = FILE` says (the
judge and reference that file compared, overall agreement, kappa and AC1, the metrics whose bias interval left the
tolerance; written by `capeval judge validate`, summarised into run.json by engine/metrics/validation.py), or that
the judge is unvalidated: its numbers were never held against a reference judge's."""

from __future__ import annotations

import html


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _num(v) -> str:
    return "–" if v is None else f"{v:.3f}"


def _row(label: str, v: dict) -> list[str]:
    status = v.get("status")
    if status == "unvalidated":
        return [_e(label), "<b>unvalidated</b>"] + ["–"] * 7 + [""]
    if status != "validated":
        return [_e(label), f"<b>{_e(status)}</b>"] + ["–"] * 7 + [f"{_e(v.get('file'))}: {_e(v.get('error'))}"]
    outside = v.get("outside_tolerance") or []
    tol = _e("no tolerance given" if v.get("tolerance") is None else (
        f"±{v['tolerance']:g}: " + (", ".join(outside) if outside else "all within")))
    if v.get("not_validated_for"):  # markup around escaped text: the cell is not escaped again
        tol += f"<br><b>not validated for {_e(', '.join(v['not_validated_for']))}</b>"
    revision = {True: "same as this run", False: "<b>differs from this run's judge</b>"}.get(
        v.get("revision_matches"), _e(v.get("judge_revision")))
    return [_e(label), "validated", _e(v.get("judge")), _e(v.get("reference")),
            f"{_e(v.get('protocol'))} ({_e(v.get('mode'))})", _e(v.get("n")), _num(v.get("agreement")),
            f"{_num(v.get('kappa'))} / {_num(v.get('ac1'))}", tol, f"{revision}<br>{_e(v.get('file'))}"]


def validation_html(records: list[dict]) -> str:
    """The section's body, from the last run record that lists its judges' validation."""
    latest = next((r["judge_validation"] for r in reversed(records or []) if r.get("judge_validation")), None)
    if not latest:
        return ("<p class='note'>No judge validation recorded (a run without judges, or from before "
                "`validated` existed).</p>")
    head = ["judge", "status", "validated judge", "reference", "protocol (mode)", "rows", "agreement",
            "kappa / AC1", "bias outside tolerance", "judge revision · file"]
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in _row(label, v)) + "</tr>" for label, v in latest.items())
    parts = [f"<table><thead><tr>{''.join(f'<th>{_e(h)}</th>' for h in head)}</tr></thead><tbody>{body}</tbody>"
             "</table>"]
    unvalidated = [label for label, v in latest.items() if v.get("status") != "validated"]
    if unvalidated:
        parts.append(f"<div class='warn'>Unvalidated judge(s): {_e(', '.join(unvalidated))}. Their verdicts were "
                     f"never compared with a reference judge's on the same captions, so how far their metrics are "
                     f"from the published judge's is unknown (`capeval judge validate`, docs/validation.md).</div>")
    parts.append("<p class='note'>Agreement, kappa and AC1 are over the validation's rows (the reference's judged "
                 "items); a bias interval is metric(judge) − metric(reference) with a paired bootstrap over videos. "
                 "A validation says how the judge behaved on that reference's data, not on this run's.</p>")
    return "\n".join(parts)
