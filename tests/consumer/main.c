/* Creates a pipeline through the installed header and library. */
#include <foxhunt.h>
#include <stdio.h>

int main(void) {
    fh_config c;
    fh_config_init(&c);
    c.backend = FH_BACKEND_CPU;
    c.batch_size = 8;
    fh_pipeline *p = NULL;
    if (fh_pipeline_create(&c, &p) != FH_OK) {
        fprintf(stderr, "%s\n", fh_last_error_message());
        return 1;
    }
    fh_pipeline_destroy(p);
    printf("foxhunt %u ok\n", fh_version());
    return fh_version() == FOXHUNT_VERSION_NUMBER ? 0 : 1;
}
