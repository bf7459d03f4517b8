"""The report's judge validation cell: the metrics outside tolerance and the protocols a judge was not validated
for are escaped once, and the cell's own markup (line break, bold) stays markup."""

from capeval.engine.report.validation import validation_html


def test_validation_cell_escapes_names_once_and_keeps_its_markup():
    record = {"local": {"status": "validated", "tolerance": 5.0, "outside_tolerance": ["a<b"],
                        "not_validated_for": ["x&y"]}}
    page = validation_html([{"judge_validation": record}])
    assert "±5: a&lt;b<br><b>not validated for x&amp;y</b>" in page
    assert "&lt;br&gt;" not in page and "&amp;amp;" not in page
