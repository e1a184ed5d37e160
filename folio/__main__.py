from folio.cli import main

raise SystemExit(main())
