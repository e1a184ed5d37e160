from storage.auditor.main import main

raise SystemExit(main())
