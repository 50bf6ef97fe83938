"""Quality a team tracks per release: golden sets from its own searches, their evaluation
against a store, reports that compare one release with the last, a weekly human check of
what extraction wrote, and the accuracy of answers drawn from retrieved memory.

A set is captured from the search log (:mod:`retold.quality.capture`) into a file people
label and freeze (:mod:`retold.quality.golden`); :mod:`retold.quality.evaluation` asks it
again through the store's own search path, and :mod:`retold.quality.report` writes the
dated report and finds the regressions. :mod:`retold.quality.audit` samples extraction's
writes for a person to judge, and :mod:`retold.quality.answering` grades a model's answers
from the retrieved memory against the expected ones. See docs/operations.md, "Tracking
quality per release" and "The extraction audit"."""
