/* next_main.c - prints what libnext_a's dlsym(RTLD_NEXT) found: 2 is right. */
#include <dlfcn.h>
#include <stdio.h>
int pl_next_call(void);
int main(void) {
  int v = pl_next_call();
  /* and a miss must stay a miss, with dlerror() set */
  void *none = dlsym(RTLD_NEXT, "pl_no_such_symbol_anywhere");
  const char *err = dlerror();
  printf("next=%d miss=%s\n", v, none == NULL && err != NULL ? "ok" : "wrong");
  return v == 2 && none == NULL && err != NULL ? 0 : 1;
}
