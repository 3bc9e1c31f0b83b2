"""Score a summary with the offline judge: no key, no network."""

from summeval_runner import create_summarization_scorer

source = (
    "The city council approved a budget of 1,200 million euros on Tuesday. "
    "Mayor Anna Lindqvist said the money will fund three new schools. "
    "Public transport fares will not rise next year."
)
summary = (
    "The council approved a budget of 1,200 million euros on Tuesday. "
    "The mayor said it will fund five new schools."
)

scorer = create_summarization_scorer("offline", {"max_questions": 5})
result = scorer.run_sync(input=source, output=summary)

print(f"score:     {result.score:.2f} ({result.status})")
print(f"alignment: {result.alignment_score:.2f}  coverage: {result.coverage_score:.2f}")
print(f"reason:    {result.reason}")
