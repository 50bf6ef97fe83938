"""Quality a team can track per release: golden sets captured from a deployment's own
searches (:mod:`retold.quality.golden`, :mod:`retold.quality.capture`), their evaluation
against a store (:mod:`retold.quality.evaluation`) and the dated reports that compare one
release with the last (:mod:`retold.quality.report`). See docs/operations.md, "Tracking
quality per release"."""
