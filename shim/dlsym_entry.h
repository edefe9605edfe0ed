/* dlsym_entry.h: the exported dlsym's C half (dlsym_entry.c, dlsym.S). */
#ifndef GEMMSHIM_DLSYM_ENTRY_H
#define GEMMSHIM_DLSYM_ENTRY_H

/* libc's dlsym (also stored in gs_sys.dlsym); NULL only
 * if libc has none. dlsym_entry_swap_with: the function the exported dlsym
 * asks, for a cublas* name found on an explicit handle, which function to
 * hand out instead (the hooks' wrapper). */
void *gs_resolve_real_dlsym(void);
void dlsym_entry_swap_with(void *(*swap)(const char *name, void *p));

#endif
