/* The callee of libplt.c: one tiny exported function. */
int tiny_add(int x) { return x + 1; }
