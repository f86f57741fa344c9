/** A random UUID: crypto.randomUUID when present (secure contexts), else the same from getRandomValues. */
export declare function uuid4(): string;
/** Whether s is a UUID in its usual text form (and not the nil UUID). */
export declare function isUuid(s: string): boolean;
/**
 * splitToolName reads a tool's name as chatd offers it: an MCP server's tools are named
 * `<server>__<tool>` (docs/tools.md), chatd's own have no server.
 */
export declare function splitToolName(name: string): {
    server: string | null;
    tool: string;
};
