"""Host-issued memory decided by need: what a turn's answer is missing, which recalled
records change the model's own draft, and whether this configuration may serve a reply
made again with them.

::

    planner.py       GapPlanner: a turn's information gaps, one search query each
    admission.py     AdmissionJudge: per candidate, fills a gap, contradicts the draft, or not needed
    orchestrator.py  UtilityOrchestrator.respond: plan, search, judge, regenerate; fail-closed
    decision.py      Gap, Verdict, TurnDecision and its dispositions
    bundles.py       the bundle hash: everything that decides a turn
    prompting.py     HostedPrompt: the structured call both make, under a versioned prompt

The search and write paths never import this package; the runtime builds the
orchestrator and the adapters call it. See docs/decisions.md, "Host-issued memory is
decided by need".
"""
