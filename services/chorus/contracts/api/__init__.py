"""The HTTP APIs Chorus services publish for each other, as models written once.

One module per service that answers (``chorus.contracts.api.audit_projector``, ...): the
service builds its answers with these models and every client parses answers into them
(:func:`chorus.web.typedclient.answer`), so neither side holds a ``dict[str, Any]`` nor a
copy of the other's model. Which service calls which is declared in the registry
(``schemas/http.yaml``), like producers and consumers of topics.

Pure pydantic v2, no I/O: this package imports nothing of the runtime or of a service.

Answers are read tolerantly (pydantic's default: an unknown field is ignored), so a
service may add a field to an answer without breaking an older client; it never removes
or retypes one.
"""
