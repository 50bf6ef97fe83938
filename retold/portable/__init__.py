"""Moving one scope's memory between stores as a file.

:mod:`.lines` (the JSON-lines format), :mod:`.exporter` (a scope to lines, streamed) and
:mod:`.importer` (lines back through the write path's checks into any store)."""
