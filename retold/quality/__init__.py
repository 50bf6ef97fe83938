"""Quality a team tracks per release: golden sets from its own searches, their evaluation
against a store, and reports that compare one release with the last.

A set is captured from the search log (:mod:`retold.quality.capture`) into a file people
label and freeze (:mod:`retold.quality.golden`); :mod:`retold.quality.evaluation` asks it
again through the store's own search path, and :mod:`retold.quality.report` writes the
dated report and finds the regressions. See docs/operations.md, "Tracking quality per
release"."""
