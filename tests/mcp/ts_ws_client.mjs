// The TypeScript SDK's WebSocketClientTransport against a daimon MCP server.
// Usage: node ts_ws_client.mjs <node_modules dir> <ws url>
// Prints one JSON line: the server's name, its tool names, and the result of calling add.
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const [modules, url] = process.argv.slice(2);
const sdk = join(modules, '@modelcontextprotocol', 'sdk', 'dist', 'esm', 'client');
const { Client } = await import(pathToFileURL(join(sdk, 'index.js')).href);
const { WebSocketClientTransport } = await import(pathToFileURL(join(sdk, 'websocket.js')).href);

const client = new Client({ name: 'ts-ws-probe', version: '0.0.0' });
await client.connect(new WebSocketClientTransport(new URL(url)));
const tools = await client.listTools();
const added = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } });
const exploded = await client.callTool({ name: 'explode', arguments: {} });
console.log(JSON.stringify({
  server: client.getServerVersion()?.name,
  tools: tools.tools.map(t => t.name).sort(),
  added,
  exploded,
}));
await client.close();
