"""The configuration: its typed blocks, how every process finds its file, and their checks.

Its typed blocks and how a file becomes one (:mod:`.schema`), the lookup every process
uses (:mod:`.env`: argument, ``RETOLD_CONFIG``, ``./config.yaml``, defaults, then the
``RETOLD_*`` overrides), the blocks kept in their own modules (:mod:`.retrieval`,
:mod:`.hosted`, :mod:`.activation`, :mod:`.utility`), the validation helpers
(:mod:`.check`) and the reference page generated from ``config.yaml`` (:mod:`.reference`).

The schema's public names are re-exported here, so ``from retold.config import Config``
reads as the layer it is.
"""

from retold.config.schema import *  # noqa: F403
from retold.config.schema import __all__ as __all__  # noqa: PLE0604
