"""``kbpack serve`` and ``kbpack mcp``: the packs behind a local web page, a JSON API and an MCP
server.

``library`` opens the packs once and serialises the calls that must not run concurrently;
``web`` is the Starlette application (HTML pages and ``/api/``); ``guard`` holds the security
rules (token, Host check, headers); ``mcp_tools`` is the Model Context Protocol server. The web
dependencies (Starlette, uvicorn, Jinja2, mcp) are the ``serve`` extra and are imported only here.
"""
