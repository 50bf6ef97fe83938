"""Answer accuracy with scripted models at the provider boundary: what each model is asked,
how the answers are graded and counted, what a failing call costs, and the one line that
says the grading was skipped."""

from __future__ import annotations

import json

from retold.hosted import FakeCompletionClient, HostedError
from retold.quality.answering import (
    ANSWER_PROMPT_VERSION,
    JUDGE_PROMPT_VERSION,
    NOT_CONFIGURED,
    AnswerItem,
    grade_answers,
    load_prompt,
)

EDITOR = AnswerItem("Which editor does Aditya use?", ("Aditya uses Helix as his editor.",
                                                      "Aditya used Neovim before Helix."), "Helix", "q1")
COFFEE = AnswerItem("How does Aditya take his coffee?", ("Aditya drinks oat milk flat whites.",),
                    "An oat milk flat white", "q2")
PASSPORT = AnswerItem("What is Aditya's passport number?", (), None, "q3")  # nothing stored answers it


def said(answer: str, known: bool = True) -> dict[str, object]:
    return {"answer": answer, "known": known}


def graded(verdict: str) -> dict[str, object]:
    return {"verdict": verdict, "reason": f"the candidate is {verdict}"}


def test_each_question_is_answered_from_its_memories_and_judged_against_the_expected_answer() -> None:
    model = FakeCompletionClient([said("Aditya uses Helix."), graded("correct"),
                                  said("Black, no sugar."), graded("incorrect"),
                                  said("I don't know", known=False)], model="answerer")

    report = grade_answers([EDITOR, COFFEE, PASSPORT], model)

    assert (report.status, report.items, report.graded, report.correct) == ("graded", 3, 3, 2)
    assert report.accuracy == 0.6667
    assert (report.answer_model, report.judge_model) == ("answerer", "answerer")
    assert [(r.item_id, r.verdict) for r in report.results] == [
        ("q1", "correct"), ("q2", "incorrect"), ("q3", "correct")]
    # Five calls: the unanswerable question is graded without a judge.
    answer, judge = model.calls[0], model.calls[1]
    assert answer.system == load_prompt(ANSWER_PROMPT_VERSION)
    assert "use only the memories" in answer.system.lower()
    assert json.loads(answer.messages[0].content) == {"question": EDITOR.question,
                                                      "memories": list(EDITOR.memories)}
    assert judge.system == load_prompt(JUDGE_PROMPT_VERSION)
    assert json.loads(judge.messages[0].content) == {"question": EDITOR.question, "expected": "Helix",
                                                     "candidate": "Aditya uses Helix."}
    assert [c.schema_name for c in model.calls] == ["memory_answer", "answer_grade"] * 2 + ["memory_answer"]


def test_a_separate_judge_grades_and_both_models_are_named() -> None:
    answerer = FakeCompletionClient([said("Helix.")], model="small-model")
    judge = FakeCompletionClient([graded("correct")], model="judge-model")

    report = grade_answers([EDITOR], answerer, judge)

    assert (report.answer_model, report.judge_model, report.accuracy) == ("small-model", "judge-model", 1.0)
    assert len(answerer.calls) == len(judge.calls) == 1
    line = report.summary()
    assert line.startswith("answer accuracy: 100.0% (1/1 correct); answered by small-model (answer_v1),"
                           " judged by judge-model (judge_v1);")


def test_claiming_to_know_what_nothing_stored_answers_is_wrong() -> None:
    model = FakeCompletionClient([said("It is X1234567.")])

    report = grade_answers([PASSPORT], model)

    assert (report.correct, report.accuracy) == (0, 0.0)
    assert report.results[0].reason == "answered although nothing stored answers this"


def test_a_failed_call_fails_its_item_only_and_stays_out_of_the_accuracy() -> None:
    model = FakeCompletionClient([HostedError("timeout", "answerer did not answer within 30000 ms"),
                                  said("An oat milk flat white."),
                                  HostedError("malformed", "judge: answer does not match answer_grade")])
    report = grade_answers([EDITOR, COFFEE], model)

    assert (report.status, report.graded, report.failed, report.accuracy) == ("graded", 0, 2, None)
    assert report.results[0].error == "timeout: answerer did not answer within 30000 ms"
    assert report.results[1].answer == "An oat milk flat white." and report.results[1].verdict is None
    assert "0/0 correct, 2 failed" in report.summary()


def test_without_a_provider_the_grading_is_skipped_in_one_line() -> None:
    report = grade_answers([EDITOR, COFFEE], None)

    assert (report.status, report.items, report.graded, report.accuracy) == ("skipped", 2, 0, None)
    assert report.reason == NOT_CONFIGURED
    assert report.summary() == f"answer accuracy: skipped ({NOT_CONFIGURED})"
    assert "\n" not in report.summary()


def test_a_provider_that_cannot_be_used_skips_the_grading_at_its_first_call() -> None:
    missing = HostedError("not_configured",
                          "claude-haiku-4-5 needs the anthropic SDK:\npip install 'retold[hosted]'")
    model = FakeCompletionClient([missing], model="claude-haiku-4-5")

    report = grade_answers([EDITOR, COFFEE], model)

    assert report.status == "skipped" and len(model.calls) == 1
    assert report.reason == "claude-haiku-4-5 needs the anthropic SDK: pip install 'retold[hosted]'"
