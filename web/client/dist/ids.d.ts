/** A random UUID: crypto.randomUUID when present (secure contexts), else the same from getRandomValues. */
export declare function uuid4(): string;
/** Whether s is a UUID in its usual text form (and not the nil UUID). */
export declare function isUuid(s: string): boolean;
