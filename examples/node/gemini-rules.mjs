// Gemini's published limits on function-declaration schemas (an OpenAPI
// subset), for the host tests: single upper-case types from the SDK's Type
// enum, ARRAY with items, OBJECT with properties, anyOf branches that are
// complete schemas with nothing typed beside them, no additionalProperties.
import { Type } from '@google/genai';

const geminiTypes = new Set(Object.values(Type).filter((t) => t !== Type.TYPE_UNSPECIFIED));

/** The rule each node of schema s breaks, as "path: problem" strings. */
export function geminiProblems(where, s, out = []) {
  if (s.anyOf) {
    if (s.type) out.push(`${where}: type beside anyOf`);
    if (s.items) out.push(`${where}: items beside anyOf`);
    s.anyOf.forEach((b, i) => {
      if (!b.type) out.push(`${where}|${i}: an anyOf branch without a type`);
      geminiProblems(`${where}|${i}`, b, out);
    });
    return out;
  }
  const type = typeof s.type === 'string' ? s.type.toUpperCase() : s.type;
  if (!geminiTypes.has(type)) out.push(`${where}: type ${JSON.stringify(s.type)}`);
  if ('additionalProperties' in s) out.push(`${where}: additionalProperties`);
  if (type === Type.ARRAY) {
    if (!s.items) out.push(`${where}: ARRAY without items`);
    else geminiProblems(`${where}[]`, s.items, out);
  }
  if (type === Type.OBJECT) {
    if (!s.properties || Object.keys(s.properties).length === 0) out.push(`${where}: OBJECT without properties`);
    for (const [k, v] of Object.entries(s.properties ?? {})) geminiProblems(`${where}.${k}`, v, out);
  }
  return out;
}
