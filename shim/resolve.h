/* resolve.h: finding real functions at run time (resolve.c). */
#ifndef GEMMSHIM_RESOLVE_H
#define GEMMSHIM_RESOLVE_H

#include "base/sys.h"
#include "dlsym_entry.h"

void resolve_init(void);
/* The real definition of hooked entry id, resolved at first use; NULL when
 * no loaded cuBLAS has it (warned once). Also loads its companions. */
void *resolve_hooked(gs_sys_id id);
/* Record the real definition a framework looked up through dlsym. */
void resolve_adopt(gs_sys_id id, void *real);
/* NULL when the driver's entries are loaded, else why not. */
const char *resolve_driver(void);
int resolve_is_self(const void *p);
/* 1 when p lies in a libcublas/libcublasLt object; *is_lt says which. */
int resolve_object_is_cublas(const void *p, int *is_lt);
/* The major version its file name gives the libcublas or libcublasLt
 * object holding p (libcublas.so.13.1.0.3: 13); 0 when the name does not
 * say (libcublas.so, another library). */
int resolve_cublas_major(const void *p);

#endif
