"""The reference workflows' agents and the sandbox, shipped as a distribution of their own.

Procurement (invoice, budget and payment agents), research (report agent and source
fetcher) and the sandbox that stands in for the world outside (an ERP, a payment API, web
sources, a model, a mail server). The demo, the tests and the benchmarks run them;
production images leave them out (``deploy/docker/Dockerfile``).
"""
