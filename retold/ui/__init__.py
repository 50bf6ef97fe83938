"""The inspector (``retold ui``): a small server-rendered web app that shows what an agent
remembers and why, to holders of a token in ``ui.tokens``. Needs the ``ui`` extra; nothing
imports it but the command, so ``import retold`` never loads a web stack."""
