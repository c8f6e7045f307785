"""Front ends over the library: the agent toolset (Hermes plugin, MCP server) and the CLI."""
