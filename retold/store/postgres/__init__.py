"""The PostgreSQL store: the same store interface over one PostgreSQL database that many
hosts share (the ``postgres`` extra). Importing this package loads nothing; psycopg is
imported only when a PostgreSQL store is opened (:func:`retold.store.location.open_store`)."""
