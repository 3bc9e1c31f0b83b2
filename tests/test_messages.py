"""What is scored (SPEC §1.2): message shapes, the summary, the source, tool results."""

from __future__ import annotations

import pytest

from summeval_runner import InputError, ToolResult, extract_tool_results
from summeval_runner._messages import extract_source, extract_summary


@pytest.mark.parametrize(
    ("output", "summary"),
    [
        ("A plain string is the summary.", "A plain string is the summary."),
        (
            [{"role": "assistant", "content": "first"}, {"role": "assistant", "content": "last"}],
            "last",
        ),
        (
            [{"role": "assistant", "content": "kept"}, {"role": "assistant", "content": "  \n "}],
            "kept",
        ),
        ([{"role": "assistant", "content": "kept"}, {"role": "user", "content": "thanks"}], "kept"),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ],
            "a\nb",
        ),
        ([{"role": "assistant", "content": {"text": "nested"}}], "nested"),
        ({"output_messages": [{"role": "assistant", "content": "snake"}]}, "snake"),
        ({"outputMessages": [{"role": "assistant", "content": "camel"}]}, "camel"),
        ({"role": "assistant", "content": "one message"}, "one message"),
        ([{"type": "ai", "content": "langchain"}], "langchain"),
        ([{"role": "user", "content": "no assistant"}], ""),
        (None, ""),
    ],
)
def test_the_summary_is_the_last_assistant_text(output: object, summary: str) -> None:
    assert extract_summary(output) == summary


@pytest.mark.parametrize(
    ("input", "source"),
    [
        ("A plain string is the source.", "A plain string is the source."),
        (
            [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "first"},
                {"role": "user", "content": "second"},
            ],
            "first",
        ),
        ({"input_messages": [{"role": "user", "content": "snake"}]}, "snake"),
        (
            {"inputMessages": [{"role": "user", "content": [{"type": "text", "text": "camel"}]}]},
            "camel",
        ),
        ({"messages": [{"role": "user", "content": "plain messages key"}]}, "plain messages key"),
    ],
)
def test_the_source_is_the_first_user_message(input: object, source: str) -> None:
    assert extract_source(input) == source


def test_tool_results_in_snake_case_parts() -> None:
    output = [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_call",
                    "tool_call_id": "t1",
                    "tool_name": "fetch",
                    "args": {"url": "u"},
                }
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool_result",
                    "tool_call_id": "t1",
                    "tool_name": "fetch",
                    "result": {"text": "page"},
                }
            ],
        },
        {"role": "assistant", "content": "The page says hello."},
    ]

    assert extract_tool_results(output) == [
        ToolResult(tool_name="fetch", tool_call_id="t1", args={"url": "u"}, result={"text": "page"})
    ]


def test_tool_results_in_camel_case_parts_get_the_call_arguments() -> None:
    output = {
        "outputMessages": [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool-call",
                        "toolCallId": "t9",
                        "toolName": "lookup",
                        "args": {"q": "x"},
                    }
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool-result", "toolCallId": "t9", "result": "found"}],
            },
        ]
    }

    assert extract_tool_results(output) == [
        ToolResult(tool_name="lookup", tool_call_id="t9", args={"q": "x"}, result="found")
    ]


def test_tool_results_from_openai_tool_messages() -> None:
    output = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_doc", "arguments": '{"id": 3}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Document three."},
    ]

    assert extract_tool_results(output) == [
        ToolResult(
            tool_name="get_doc", tool_call_id="call_1", args={"id": 3}, result="Document three."
        )
    ]


def test_a_tool_result_can_be_the_source() -> None:
    from summeval_runner import FakeJudge, PreprocessInput, create_summarization_scorer

    judge = FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q"],
        },
        analyze={"coverage": []},
    )
    scorer = create_summarization_scorer(
        judge, {"source_extractor": lambda input, output: extract_tool_results(output)[0].result}
    )
    output = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "read", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "The fetched article."},
        {"role": "assistant", "content": "A summary."},
    ]

    scorer.run_sync(input="Summarize the article you fetch.", output=output)

    payload = judge.requests_for("preprocess")[0].payload
    assert isinstance(payload, PreprocessInput)
    assert payload.source == "The fetched article."


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (42, "output: expected a string, a list of messages or a mapping, got int"),
        ([{"role": "assistant", "content": 7}], "output message 0: content must be a string"),
        ([{"role": 3, "content": "x"}], "output message 0: 'role' must be a string, got int"),
        ({"unexpected": 1}, "output: a mapping must hold a message"),
        (
            [{"role": "assistant", "content": [{"type": "text", "text": 5}]}],
            "output message 0 part 0: 'text' must be a string",
        ),
    ],
)
def test_unreadable_payloads_say_where_and_what(output: object, message: str) -> None:
    with pytest.raises(InputError) as raised:
        extract_summary(output)
    assert str(raised.value).startswith(message)
