/* A shared object that is not a flashport module: it lacks the entry symbol. */
#include "flashport.h"

FLASHPORT_API int not_a_backend(void) { return 42; }
