// seal.cjs BUNDLE KEY: reads a stored login (JSON) on stdin and prints it
// encrypted as qodercli stores it, with the credential_storage_encrypt of
// the auth WebAssembly module its bundle embeds, keyed as the CLI keys it
// (the first 16 characters of its .auth/machine_id). The glue below is
// this file's own: just enough of wasm-bindgen's calling convention for
// that one function.
'use strict';
const fs = require('fs');
const crypto = require('crypto');

const [bundle, key] = process.argv.slice(2);
const src = fs.readFileSync(bundle, 'utf8');
let mod;
for (const m of src.matchAll(/"(AGFzbQ[A-Za-z0-9+/=]{1000,})"/g)) {
  const cand = new WebAssembly.Module(Buffer.from(m[1], 'base64'));
  if (WebAssembly.Module.exports(cand).some((e) => e.name === 'credential_storage_encrypt')) {
    mod = cand;
    break;
  }
}
if (!mod) {
  console.error('no auth module with credential_storage_encrypt in ' + bundle);
  process.exit(2);
}

const heap = [undefined, null, true, false];
const add = (o) => heap.push(o) - 1;
let inst;
const mem = () => new Uint8Array(inst.exports.memory.buffer);
const str = (p, l) => new TextDecoder().decode(mem().subarray(p, p + l));
const byName = {
  object_drop_ref: () => {}, object_clone_ref: (i) => add(heap[i]),
  crypto: () => add(crypto.webcrypto), process: () => add(process), versions: () => add(process.versions),
  node: () => add(process.versions.node), msCrypto: () => add(undefined),
  require: () => { throw new Error('require is not offered'); },
  getRandomValues: (a, b) => { crypto.webcrypto.getRandomValues(heap[b]); },
  randomFillSync: (a, b) => { crypto.randomFillSync(heap[b]); },
  call: (f, t) => add(heap[f].call(heap[t])),
  new_with_length: (n) => add(new Uint8Array(n >>> 0)), length: (i) => heap[i].length,
  prototypesetcall: (p, l, i) => { mem().set(heap[i].subarray(0, l), p); },
  subarray: (i, a, b) => add(heap[i].subarray(a >>> 0, b >>> 0)),
  new: () => add(new Map()), set: () => {}, now: () => Date.now(),
  static_accessor_GLOBAL_THIS: () => add(globalThis), static_accessor_GLOBAL: () => add(globalThis),
  static_accessor_SELF: () => 0, static_accessor_WINDOW: () => 0,
  throw: (p, l) => { throw new Error(str(p, l)); }, Error: (p, l) => add(new Error(str(p, l))),
  is_object: (i) => typeof heap[i] === 'object' && heap[i] !== null, is_string: (i) => typeof heap[i] === 'string',
  is_function: (i) => typeof heap[i] === 'function', is_undefined: (i) => heap[i] === undefined,
  cast_0000000000000001: (a) => add(a), cast_0000000000000002: (p, l) => add(str(p, l)),
};
const imports = {};
for (const im of WebAssembly.Module.imports(mod)) {
  // __wbg_NAME_HASH or __wbindgen_NAME: find NAME.
  const name = im.name.startsWith('__wbindgen_') ? im.name.slice('__wbindgen_'.length)
    : im.name.replace(/^__wbg___wbindgen_|^__wbg_/, '').replace(/_[0-9a-f]{16}$/, '');
  if (!byName[name]) {
    console.error('the auth module imports ' + im.name + ', which this glue lacks');
    process.exit(2);
  }
  (imports[im.module] ??= {})[im.name] = byName[name];
}
inst = new WebAssembly.Instance(mod, imports);
const E = inst.exports;
const pass = (s) => {
  const b = new TextEncoder().encode(s);
  const p = E.__wbindgen_export2(b.length, 1) >>> 0;
  mem().set(b, p);
  return [p, b.length];
};
const data = fs.readFileSync(0, 'utf8');
const ret = E.__wbindgen_add_to_stack_pointer(-16);
E.credential_storage_encrypt(ret, ...pass(data), ...pass(key.slice(0, 16)));
const dv = new DataView(E.memory.buffer);
const [p, l, , isErr] = [0, 4, 8, 12].map((o) => dv.getInt32(ret + o, true));
if (isErr) {
  console.error('credential_storage_encrypt failed');
  process.exit(1);
}
process.stdout.write(str(p, l));
